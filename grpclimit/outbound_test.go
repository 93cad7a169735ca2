package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// upstreamService allows capacity + rate x window in every window of its
// calls (an exact token bucket on their arrivals), answers
// ResourceExhausted above it, and reports each call's cost in the
// trailer "x-cost". The tests give it one call more than the shared
// quota's capacity: the calls' jitter on their way to it.
type upstreamService struct {
	testpb.UnimplementedTestServiceServer
	mu             sync.Mutex
	rate, capacity float64
	tokens         float64
	last           time.Time
	ok, exhausted  atomic.Int64
	cost           string
}

func (u *upstreamService) GetItem(ctx context.Context, r *testpb.GetItemRequest) (*testpb.Item, error) {
	u.mu.Lock()
	now := time.Now()
	if !u.last.IsZero() {
		u.tokens = min(u.capacity, u.tokens+now.Sub(u.last).Seconds()*u.rate)
	}
	u.last = now
	ok := u.tokens >= 1
	if ok {
		u.tokens--
	}
	u.mu.Unlock()
	if !ok {
		u.exhausted.Add(1)
		return nil, status.Error(codes.ResourceExhausted, "over the upstream's quota")
	}
	u.ok.Add(1)
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-cost", u.cost))
	return &testpb.Item{Id: r.GetId()}, nil
}

func startUpstream(t *testing.T, u *upstreamService) *bufconn.Listener {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, u)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis
}

func waitClient(t *testing.T, lis *bufconn.Listener, i grpc.UnaryClientInterceptor) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithUnaryInterceptor(i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	// connected before the run: a dial delays a call past its time and
	// bunches it with the next
	cc.Connect()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("connection never ready: %v", s)
		}
	}
	return testpb.NewTestServiceClient(cc)
}

func waitLimiter(t *testing.T, prefix string, q quota.Quota) *core.Limiter {
	t.Helper()
	l, err := core.New(redistest.Client(t), quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: "upstream", Quota: q}}, nil
	}), core.WithPrefix(prefix), core.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func callOf(cost int64) func(context.Context, string, any) core.Request {
	return func(context.Context, string, any) core.Request {
		return core.Request{Tenant: quota.Tenant{ID: "org"}, Class: "upstream", Cost: cost}
	}
}

// Three limiters (as three processes) call one upstream through the
// interceptor as fast as 12 goroutines go: it never answers
// ResourceExhausted, and gets nearly its whole quota.
func TestWaitInterceptorWaitsItsTurn(t *testing.T) {
	q := quota.Quota{Capacity: 5, RefillPerSecond: 40}
	up := &upstreamService{rate: q.RefillPerSecond, capacity: float64(q.Capacity) + 1, tokens: float64(q.Capacity) + 1, cost: "1"}
	lis := startUpstream(t, up)
	prefix := redistest.Prefix(t) // one set of buckets
	var clients []testpb.TestServiceClient
	for range 3 {
		clients = append(clients, waitClient(t, lis, grpclimit.WaitUnaryClientInterceptor(waitLimiter(t, prefix, q), callOf(1), nil)))
	}
	const run = 2 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < run {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := clients[i%3].GetItem(ctx, &testpb.GetItemRequest{Id: strconv.Itoa(i)})
				cancel()
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if up.exhausted.Load() != 0 || failed.Load() != 0 {
		t.Errorf("upstream answered ResourceExhausted %d times; %d calls failed", up.exhausted.Load(), failed.Load())
	}
	bound := float64(q.Capacity) + q.RefillPerSecond*elapsed.Seconds()
	if got := float64(up.ok.Load()); got > bound+1 || got < 0.9*bound {
		t.Errorf("upstream got %v calls in %v, want 0.9 to 1 x %.1f", got, elapsed, bound)
	}
	t.Logf("%d calls in %v (bound %.1f)", up.ok.Load(), elapsed, bound)
}

// A call the quota cannot admit before its deadline is not sent
// (ResourceExhausted); the cost function settles the reservation from the
// trailer.
func TestWaitInterceptorRefusesAndSettles(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 0.01}
	up := &upstreamService{rate: 1000, capacity: 1000, tokens: 1000, cost: "1"}
	lis := startUpstream(t, up)
	lim := waitLimiter(t, redistest.Prefix(t), q)
	c := waitClient(t, lis, grpclimit.WaitUnaryClientInterceptor(lim, callOf(5),
		func(_ string, _ any, _, trailer metadata.MD) (int64, bool) {
			vs := trailer.Get("x-cost")
			if len(vs) != 1 {
				return 0, false
			}
			n, err := strconv.ParseInt(vs[0], 10, 64)
			return n, err == nil
		}))
	for range 2 { // 5 reserved, 1 used: 4 back each time
		if _, err := c.GetItem(t.Context(), &testpb.GetItemRequest{Id: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := lim.Peek(t.Context(), quota.Tenant{ID: "org"}, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	if d.Tokens < 8 || d.Tokens > 8.1 {
		t.Fatalf("after two calls of estimate 5 that cost 1: %v tokens, want 8", d.Tokens)
	}
	if _, err := lim.Allow(t.Context(), quota.Tenant{ID: "org"}, "upstream", 8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = c.GetItem(ctx, &testpb.GetItemRequest{Id: "b"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call the quota cannot admit in time: %v", err)
	}
	if up.ok.Load() != 2 {
		t.Fatalf("the upstream got %d calls, want 2", up.ok.Load())
	}
}
