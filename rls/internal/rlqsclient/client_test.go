package rlqsclient

import (
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fake is an RLQS server a test scripts: it hands over every report and
// sends what the test gives it on the current stream.
type fake struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	reports chan *rlqsv3.RateLimitQuotaUsageReports
	send    chan *rlqsv3.RateLimitQuotaResponse
	streams chan struct{}
	cut     chan struct{} // closing the current stream's cut ends it
}

func (f *fake) StreamRateLimitQuotas(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	f.streams <- struct{}{}
	errs := make(chan error, 1)
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				errs <- err
				return
			}
			f.reports <- m
		}
	}()
	for {
		select {
		case m := <-f.send:
			if err := s.Send(m); err != nil {
				return err
			}
		case <-f.cut:
			return nil
		case <-errs:
			return nil
		}
	}
}

func start(t *testing.T) (*fake, *grpc.ClientConn) {
	t.Helper()
	f := &fake{reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 100), send: make(chan *rlqsv3.RateLimitQuotaResponse),
		streams: make(chan struct{}, 10), cut: make(chan struct{})}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); g.Stop() })
	return f, cc
}

func report(t *testing.T, f *fake) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	select {
	case m := <-f.reports:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10 s")
		return nil
	}
}

func assignTB(max, perFill uint32, fill, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_ {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl),
		RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}},
	}}
}

// waitAssigned waits until c has applied an assignment after since.
func waitAssigned(t *testing.T, c *Client, since time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !c.Stats().Assigned.After(since); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no assignment applied within 10 s")
		}
	}
}

var acme = map[string]string{"tenant": "acme"}

// The first request is allowed and reported at once with time_elapsed 0;
// a token bucket admits its max_tokens, then denies; re-sent equal it
// keeps its state, changed it starts full; abandon erases the bucket.
func TestAssignments(t *testing.T) {
	f, cc := start(t)
	c := New(Config{Domain: "d", ReportInterval: time.Hour}, cc)
	defer c.Close()
	if !c.Allow(acme) {
		t.Fatal("a new bucket's first request was denied")
	}
	m := report(t, f)
	u := m.GetBucketQuotaUsages()[0]
	if m.GetDomain() != "d" || u.GetNumRequestsAllowed() != 1 || u.GetTimeElapsed().AsDuration() != 0 {
		t.Fatalf("first report %v", m)
	}
	id := u.GetBucketId()
	now := time.Now()
	f.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{BucketId: id, BucketAction: assignTB(3, 1, time.Hour, time.Hour)}}}
	waitAssigned(t, c, now)
	for i := range 3 {
		if !c.Allow(acme) {
			t.Fatalf("request %d of a bucket of 3 denied", i)
		}
	}
	if c.Allow(acme) {
		t.Fatal("a fourth request of a bucket of 3 allowed")
	}
	now = time.Now()
	f.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{BucketId: id, BucketAction: assignTB(3, 1, time.Hour, 2*time.Hour)}}}
	waitAssigned(t, c, now)
	if c.Allow(acme) {
		t.Fatal("an equal assignment (another TTL) refilled the bucket")
	}
	now = time.Now()
	f.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{BucketId: id, BucketAction: assignTB(2, 1, time.Hour, time.Hour)}}}
	waitAssigned(t, c, now)
	if !c.Allow(acme) || !c.Allow(acme) || c.Allow(acme) {
		t.Fatal("a changed assignment did not start full at its max_tokens")
	}
	f.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, _, _, _, ok := c.Assignment(acme); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("abandon did not erase the bucket")
		}
	}
	if !c.Allow(acme) {
		t.Fatal("after abandon, the first request was denied")
	}
	if u := report(t, f).GetBucketQuotaUsages()[0]; u.GetNumRequestsAllowed() != 1 || u.GetTimeElapsed().AsDuration() != 0 {
		t.Fatalf("after abandon, the first report %v", u)
	}
}

// On expiry the fallback applies for its timeout (whole seconds), then
// the no-assignment behaviour; a TTL counts whole seconds only.
func TestExpiry(t *testing.T) {
	f, cc := start(t)
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	c := New(Config{ReportInterval: time.Hour, Fallback: deny, FallbackTimeout: 1500 * time.Millisecond, Now: now}, cc)
	defer c.Close()
	c.Allow(acme)
	id := report(t, f).GetBucketQuotaUsages()[0].GetBucketId()
	f.send <- &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{BucketId: id, BucketAction: assignTB(100, 100, time.Second, 1900*time.Millisecond)}}}
	waitAssigned(t, c, now().Add(-time.Nanosecond))
	if !c.Allow(acme) {
		t.Fatal("denied under a bucket of 100")
	}
	advance(1100 * time.Millisecond) // past the TTL's whole second (of 1.9 s)
	if c.Allow(acme) {
		t.Fatal("allowed after the TTL's whole second: the fallback DENY_ALL should apply")
	}
	advance(time.Second) // past the fallback's whole second (of 1.5 s)
	if !c.Allow(acme) {
		t.Fatal("denied after the fallback's timeout: the no-assignment behaviour (allow) should apply")
	}
}

// A broken stream is reopened at the next report tick, on the next
// connection; a report while it is down is dropped.
func TestReconnect(t *testing.T) {
	f1, cc1 := start(t)
	f2, cc2 := start(t)
	c := New(Config{ReportInterval: 200 * time.Millisecond}, cc1, cc2)
	defer c.Close()
	c.Allow(acme)
	report(t, f1)
	<-f1.streams
	close(f1.cut) // the server ends the stream
	select {
	case <-f2.streams:
	case <-time.After(10 * time.Second):
		t.Fatal("no stream on the second server within 10 s")
	}
	if r := report(t, f2); len(r.GetBucketQuotaUsages()) != 1 {
		t.Fatalf("report on the new stream: %v", r)
	}
	if s := c.Stats(); s.Streams != 2 {
		t.Fatalf("stats %+v: want 2 streams", s)
	}
}
