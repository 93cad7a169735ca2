package test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
	"github.com/tollgate-go/tollgate/rls"
	"github.com/tollgate-go/tollgate/rls/internal/rlqsclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The RLQS tests' quota: 400 burst, 100/s; assignments live 2 s and the
// clients report every second, so the capacity covers rate x (TTL + 2 s).
const (
	rlqsCap    = 1000
	rlqsRate   = 100.0
	rlqsTTL    = 3 * time.Second
	rlqsReport = 2 * time.Second
)

func rlqsTiers() quota.Tiers {
	return quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: rlqsCap, RefillPerSecond: rlqsRate},
			"export":  {Capacity: 10, RefillPerSecond: 1},
			"slots":   {Capacity: 10, RefillPerSecond: 1, Concurrency: 2},
			// refills 1 token in 100 s: a refund shows
			"slow": {Capacity: 100, RefillPerSecond: 0.01},
		}},
	}}
}

// scriptCalls is the script calls rdb's servers have run (INFO
// commandstats of every master).
func scriptCalls(t *testing.T, rdb redis.UniversalClient) int64 {
	ctx := context.Background()
	var mu sync.Mutex
	var n int64
	count := func(c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			switch name {
			case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_fcall", "cmdstat_fcall_ro":
			default:
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if !ok || err != nil {
				return fmt.Errorf("commandstats line %q", line)
			}
			mu.Lock()
			n += v
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return count(m) })
	case *redis.Client:
		err = count(c)
	default:
		err = fmt.Errorf("client %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// quotaServer serves a QuotaService over lim and rdb on a loopback port;
// stop ends it (its streams break).
type quotaServer struct {
	addr string
	svc  *rls.QuotaService
	g    *grpc.Server
	done chan struct{}
}

func startQuotaServer(t *testing.T, lim *core.Limiter, rdb redis.UniversalClient, opts ...rls.QuotaOption) *quotaServer {
	t.Helper()
	svc, err := rls.NewQuotaService(lim, rdb, append([]rls.QuotaOption{rls.WithAssignmentTTL(rlqsTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &quotaServer{addr: ln.Addr().String(), svc: svc, g: g, done: make(chan struct{})}
	go func() { defer close(s.done); _ = g.Serve(ln) }()
	t.Cleanup(s.stop)
	return s
}

func (s *quotaServer) stop() {
	s.svc.Close() // the streams refund while the limiter is open
	s.g.Stop()
	<-s.done
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

var denyFallback = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}

func newQuotaClient(t *testing.T, conns ...*grpc.ClientConn) *rlqsclient.Client {
	c := rlqsclient.New(rlqsclient.Config{Domain: "test", ReportInterval: rlqsReport, Fallback: denyFallback, FallbackTimeout: time.Hour}, conns...)
	t.Cleanup(c.Close)
	return c
}

// outstanding is the most c's current assignment of id can admit before
// its TTL ends (what its reservation covers).
func outstanding(c *rlqsclient.Client, id map[string]string) float64 {
	b, k, f, ttl, ok := c.Assignment(id)
	if !ok {
		return 0
	}
	return float64(b) + math.Ceil(float64(k)*ttl.Seconds()/f.Seconds())
}

// offer sends rate requests a second of bucket id through c until ctx
// ends.
func offer(ctx context.Context, c *rlqsclient.Client, id map[string]string, rate float64, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.Allow(id)
		}
	}
}

type rlqsRun struct {
	demands  []float64 // requests per second each client offers
	servers  int
	duration time.Duration
	settle   time.Duration // when the fairness window starts
}

func backends() []struct {
	name string
	c    func(t *testing.T) redis.UniversalClient
} {
	return []struct {
		name string
		c    func(t *testing.T) redis.UniversalClient
	}{
		// a private server: its script calls are this test's alone
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.NewServer(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }},
	}
}

// Clients over demand: admissions never above capacity + rate x elapsed +
// the outstanding reservations at any sample, each client within 10% of
// its max-min fair share after two report periods, and at most 5 script
// calls per 1,000 client requests.
func TestQuotaServiceDividesTheBucket(t *testing.T) {
	for _, b := range backends() {
		for _, run := range []struct {
			name string
			rlqsRun
		}{
			{"even", rlqsRun{demands: []float64{150, 150, 150, 150}, servers: 2, duration: 10 * time.Second, settle: 5 * time.Second}},
			{"skewed", rlqsRun{demands: []float64{10, 20, 300, 300}, servers: 2, duration: 10 * time.Second, settle: 5 * time.Second}},
		} {
			t.Run(b.name+"/"+run.name, func(t *testing.T) { runDivision(t, b.c(t), run.rlqsRun) })
		}
	}
}

func runDivision(t *testing.T, rdb redis.UniversalClient, run rlqsRun) {
	lim := testkit.NewLimiter(t, rdb, rlqsTiers(), core.WithBatching(false))
	t.Cleanup(func() { _ = lim.Close() })
	var servers []*quotaServer
	for range run.servers {
		servers = append(servers, startQuotaServer(t, lim, rdb))
	}
	// one client process per demand, each streaming to one server
	clients := make([]*quotaChild, len(run.demands))
	start := time.Now()
	for i := range clients {
		clients[i] = startQuotaChild(t, quotaChildSpec{Addrs: []string{servers[i%len(servers)].addr}, Demand: run.demands[i], Duration: run.duration})
	}
	ctx, cancel := context.WithTimeout(context.Background(), run.duration)
	defer cancel()
	var windowStart []rlqsclient.Stats
	var windowAt time.Time
	var callsAt int64
	var worst float64 = math.Inf(1)
	over := math.Inf(-1) // admissions above capacity + rate x elapsed, at most
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-sample.C:
			var admitted, out float64
			for _, c := range clients {
				s := c.snapshot()
				admitted += float64(s.Stats.Allowed)
				out += s.Out
			}
			bound := rlqsCap + rlqsRate*now.Sub(start).Seconds() + out + float64(len(clients))
			if admitted > bound {
				t.Errorf("at %v: %v admitted, above the bound %.1f", now.Sub(start), admitted, bound)
			}
			worst = min(worst, bound-admitted)
			over = max(over, admitted-(rlqsCap+rlqsRate*now.Sub(start).Seconds()))
			if windowStart == nil && now.Sub(start) >= run.settle {
				for _, c := range clients {
					windowStart = append(windowStart, c.snapshot().Stats)
				}
				windowAt = now
				callsAt = scriptCalls(t, rdb)
			}
		}
	}
	// the window ends here, while the clients still run (their streams'
	// end refunds are not steady state)
	callsEnd, windowEnd := scriptCalls(t, rdb), time.Now()
	ends := make([]rlqsclient.Stats, len(clients))
	for i, c := range clients {
		ends[i] = c.snapshot().Stats
	}
	waitQuotaChildren(t, clients, 30*time.Second)
	// the fair shares of the demands as offered in the window (a loaded
	// machine offers less than asked)
	window := windowEnd.Sub(windowAt).Seconds()
	var offered float64
	demands := make([]float64, len(clients))
	for i, s := range ends {
		demands[i] = float64(s.Allowed+s.Denied-windowStart[i].Allowed-windowStart[i].Denied) / window
		offered += demands[i] * window
	}
	// what the bucket gave in the window, divided max-min fair: the rate,
	// and while the window runs, what is left of the capacity's burst (a
	// loaded machine's clients drain it later)
	var given float64
	for i, s := range ends {
		given += float64(s.Allowed-windowStart[i].Allowed) / window
	}
	shares := fairShares(given, demands)
	t.Logf("the bucket gave %.1f/s in the window (rate %.0f/s)", given, rlqsRate)
	for i, s := range ends {
		got := float64(s.Allowed-windowStart[i].Allowed) / window
		t.Logf("client %d: demand %.1f/s, admitted %.1f/s, fair share %.1f/s, streams %d", i, demands[i], got, shares[i], s.Streams)
		if math.Abs(got-shares[i]) > 0.1*shares[i] {
			t.Errorf("client %d admitted %.1f/s, not within 10%% of its fair share %.1f/s", i, got, shares[i])
		}
	}
	totalCalls := float64(callsEnd - callsAt)
	per1000 := totalCalls / offered * 1000
	t.Logf("closest to the bound: %.1f below (admissions minus capacity + rate x elapsed: at most %.1f); %v script calls for %.0f requests: %.2f per 1,000", worst, over, totalCalls, offered, per1000)
	if per1000 > 5 {
		t.Errorf("%.2f script calls per 1,000 requests, more than 5", per1000)
	}
}

// fairShares is the max-min fair division of rate among demands.
func fairShares(rate float64, demands []float64) []float64 {
	out := make([]float64, len(demands))
	left, n := rate, len(demands)
	done := make([]bool, n)
	for k := 0; k < n; k++ {
		// the smallest unserved demand gets min(demand, equal share of what is left)
		i := -1
		for j := range demands {
			if !done[j] && (i < 0 || demands[j] < demands[i]) {
				i = j
			}
		}
		out[i] = min(demands[i], left/float64(n-k))
		left -= out[i]
		done[i] = true
	}
	for i := range out {
		out[i] += left / float64(n)
	}
	return out
}

// peekTokens is the balance of acme's slow bucket.
func peekTokens(t *testing.T, lim *core.Limiter) float64 {
	d, err := lim.Peek(context.Background(), quota.Tenant{ID: "acme"}, "slow")
	if err != nil {
		t.Fatal(err)
	}
	return d.Tokens
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// A client that stops sending requests has its bucket abandoned after
// WithIdleReports periods of zeros, and its reservation refunded: the
// bucket is full again.
func TestQuotaServiceAbandonsAnIdleBucket(t *testing.T) {
	rdb := redistest.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers())
	t.Cleanup(func() { _ = lim.Close() })
	srv := startQuotaServer(t, lim, rdb, rls.WithIdleReports(2))
	c := newQuotaClient(t, dial(t, srv.addr))
	id := map[string]string{"tenant": "acme", "class": "slow"}
	c.Allow(id)
	waitFor(t, 5*time.Second, "first assignment", func() bool { _, _, _, _, ok := c.Assignment(id); return ok })
	if tok := peekTokens(t, lim); tok > 90 {
		t.Fatalf("after the first assignment the bucket holds %v: nothing reserved", tok)
	}
	// idle from now: abandoned after 2 reports of zeros (within 3 report
	// periods), the reservation back (the bucket full again at the rate)
	took := waitFor(t, 4*rlqsReport+time.Second, "abandon", func() bool {
		_, _, _, _, ok := c.Assignment(id)
		return !ok
	})
	waitFor(t, time.Second, "refund", func() bool { return peekTokens(t, lim) >= 99 })
	t.Logf("abandoned and refunded %v after the last request", took)
}

// A bucket ID with another entry, or an unknown class, is refused:
// DENY_ALL, with why to the error handler.
func TestQuotaServiceRefusesForeignBuckets(t *testing.T) {
	rdb := redistest.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers())
	t.Cleanup(func() { _ = lim.Close() })
	var mu sync.Mutex
	var errs []string
	srv := startQuotaServer(t, lim, rdb, rls.WithQuotaErrorHandler(func(_ context.Context, err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}))
	c := newQuotaClient(t, dial(t, srv.addr))
	for _, tc := range []struct {
		id   map[string]string
		want string
	}{
		{map[string]string{"tenant": "acme", "path": "/x"}, `entry "path"`},
		{map[string]string{"class": "default"}, `no "tenant" entry`},
		{map[string]string{"tenant": "acme", "class": "nope"}, "no quota"},
		{map[string]string{"tenant": "acme", "class": "slots"}, "concurrency limit"},
	} {
		c.Allow(tc.id) // the first request: allowed, as Envoy's
		waitFor(t, 5*time.Second, fmt.Sprint("a deny for ", tc.id), func() bool { return !c.Allow(tc.id) })
		mu.Lock()
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e, tc.want)
		}
		mu.Unlock()
		if !found {
			t.Errorf("%v: no error saying %q in %q", tc.id, tc.want, errs)
		}
	}
}

// A stream that ends returns its reservation.
func TestQuotaServiceRefundsAtStreamEnd(t *testing.T) {
	rdb := redistest.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers())
	t.Cleanup(func() { _ = lim.Close() })
	srv := startQuotaServer(t, lim, rdb)
	cc := dial(t, srv.addr)
	c := rlqsclient.New(rlqsclient.Config{Domain: "test", ReportInterval: rlqsReport}, cc)
	id := map[string]string{"tenant": "acme", "class": "slow"}
	c.Allow(id)
	waitFor(t, 5*time.Second, "first assignment", func() bool { _, _, _, _, ok := c.Assignment(id); return ok })
	if tok := peekTokens(t, lim); tok > 90 {
		t.Fatalf("after the first assignment the bucket holds %v: nothing reserved", tok)
	}
	c.Close()
	waitFor(t, 5*time.Second, "refund at stream end", func() bool { return peekTokens(t, lim) >= 99 })
}

// Two tollgate-rls processes on one Redis, four clients, two streaming to
// each; one process is killed (SIGKILL) mid-stream: its clients reopen
// their streams on the other at their next report, admissions stay within
// the bound throughout, and the time until every cut-off client has an
// assignment from the survivor is measured.
func TestQuotaServiceSurvivesAServerKill(t *testing.T) {
	srv := redistest.NewServer(t)
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	tiers := fmt.Sprintf("version: 1\ndefault_tier: free\ntiers:\n  free:\n    classes:\n      default: {capacity: %d, refill_per_second: %v}\n", rlqsCap, rlqsRate)
	if err := os.WriteFile(cfg, []byte(tiers), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*rlsProcess
	var addrs []string
	for range 2 {
		addr := freeLoopback(t)
		p := startRLS(t, "ADDR="+addr, "METRICS_ADDR=off", "REDIS_URL="+srv.URL(), "TOLLGATE_CONFIG="+cfg, "TOLLGATE_RLQS_TTL="+rlqsTTL.String())
		cc := dial(t, addr)
		waitServing(t, p, cc)
		procs, addrs = append(procs, p), append(addrs, addr)
	}
	const killAt, duration = 7 * time.Second, 16 * time.Second
	clients := make([]*quotaChild, 4)
	start := time.Now()
	for i := range clients { // processes 0 and 2 stream to the process killed
		clients[i] = startQuotaChild(t, quotaChildSpec{Addrs: addrsFrom(addrs, i), Demand: 150, Duration: duration})
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var killed time.Time
	var recovered time.Duration
	var worst = math.Inf(1)
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-sample.C:
			var admitted, out float64
			for _, c := range clients {
				s := c.snapshot()
				admitted += float64(s.Stats.Allowed)
				out += s.Out
			}
			bound := rlqsCap + rlqsRate*now.Sub(start).Seconds() + out + float64(len(clients))
			if admitted > bound {
				t.Errorf("at %v: %v admitted, above the bound %.1f", now.Sub(start), admitted, bound)
			}
			worst = min(worst, bound-admitted)
			if killed.IsZero() && now.Sub(start) >= killAt {
				_ = procs[0].cmd.Process.Kill()
				<-procs[0].done
				killed = time.Now()
			}
			if !killed.IsZero() && recovered == 0 {
				back := true
				for i := 0; i < len(clients); i += 2 { // the clients that streamed to the killed process
					s := clients[i].snapshot().Stats
					back = back && s.Streams >= 2 && s.Assigned.After(killed)
				}
				if back {
					recovered = now.Sub(killed)
				}
			}
		}
	}
	waitQuotaChildren(t, clients, 30*time.Second)
	if recovered == 0 {
		t.Fatalf("the cut-off clients had no assignment from the surviving process within %v of the kill", duration-killAt)
	}
	if limit := rlqsReport + time.Second; recovered > limit {
		t.Errorf("recovered %v after the kill, more than a report interval and a second (%v)", recovered, limit)
	}
	var total uint64
	for i, c := range clients {
		s := c.snapshot().Stats
		total += s.Allowed
		t.Logf("client %d: %d admitted, %d denied, %d streams, %d reports dropped", i, s.Allowed, s.Denied, s.Streams, s.Dropped)
	}
	t.Logf("recovered %v after the kill; %d admitted in %v (capacity + rate x elapsed: %.0f); closest to the bound: %.1f below",
		recovered, total, duration, rlqsCap+rlqsRate*duration.Seconds(), worst)
}

// A gateway that stops reporting while its stream stays open (hung) has
// its bucket abandoned and its reservation refunded within
// WithIdleReports + 1 TTLs of its last report.
func TestQuotaServiceAbandonsASilentStream(t *testing.T) {
	rdb := redistest.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers())
	t.Cleanup(func() { _ = lim.Close() })
	srv := startQuotaServer(t, lim, rdb, rls.WithIdleReports(2))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, srv.addr)).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme", "class": "slow"}}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "test", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	res, err := stream.Recv()
	if err != nil || res.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
		t.Fatalf("first answer %v, %v: want a token bucket", res, err)
	}
	if tok := peekTokens(t, lim); tok > 90 {
		t.Fatalf("after the first assignment the bucket holds %v: nothing reserved", tok)
	}
	res, err = stream.Recv() // silent from here: the next message is the abandon
	if err != nil || res.GetBucketAction()[0].GetAbandonAction() == nil {
		t.Fatalf("second answer %v, %v: want an abandon", res, err)
	}
	took := time.Since(last)
	if limit := 3 * rlqsTTL; took > limit+time.Second {
		t.Errorf("abandoned %v after the last report, later than %v", took, limit)
	}
	if tok := peekTokens(t, lim); tok < 98 {
		t.Errorf("after the abandon the bucket holds %v: the reservation was not refunded", tok)
	}
	t.Logf("abandoned and refunded %v after the last report", took)
}

// Close ends the streams with Unavailable, refunding their reservations,
// and refuses new ones.
func TestQuotaServiceClose(t *testing.T) {
	rdb := redistest.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers())
	t.Cleanup(func() { _ = lim.Close() })
	svc, err := rls.NewQuotaService(lim, rdb, rls.WithAssignmentTTL(rlqsTTL))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ln) }()
	defer func() { g.Stop(); <-served }()
	client := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, ln.Addr().String()))
	stream, err := client.StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme", "class": "slow"}}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if tok := peekTokens(t, lim); tok > 90 {
		t.Fatalf("after the first assignment the bucket holds %v: nothing reserved", tok)
	}
	closed := make(chan struct{})
	go func() { svc.Close(); close(closed) }()
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the stream after Close: %v, want Unavailable", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s")
	}
	if tok := peekTokens(t, lim); tok < 98 {
		t.Errorf("after Close the bucket holds %v: the reservation was not refunded", tok)
	}
	s2, err := client.StreamRateLimitQuotas(context.Background())
	if err == nil {
		_, err = s2.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a stream opened after Close: %v, want Unavailable", err)
	}
}

// A bucket first reported while Redis does not answer is denied, and
// assigned a token bucket at the first report after Redis answers again.
func TestQuotaServiceRetriesABucketAfterAStoreFailure(t *testing.T) {
	srv := redistest.NewServer(t)
	proxy := redistest.NewFaultProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := testkit.NewLimiter(t, rdb, rlqsTiers(), core.WithTimeout(200*time.Millisecond))
	t.Cleanup(func() { _ = lim.Close() })
	qs := startQuotaServer(t, lim, rdb)
	proxy.Set(redistest.Reset)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, qs.addr)).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}
	send := func(elapsed time.Duration) *typev3.RateLimitStrategy {
		t.Helper()
		if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: id, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: 1},
		}}); err != nil {
			t.Fatal(err)
		}
		res, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return res.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()
	}
	if s := send(0); s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL || s.GetTokenBucket() != nil {
		t.Fatalf("with Redis down: %v, want DENY_ALL", s)
	}
	proxy.Set(redistest.Pass)
	if s := send(time.Second); s.GetTokenBucket() == nil {
		t.Fatalf("with Redis back: %v, want a token bucket", s)
	}
}
