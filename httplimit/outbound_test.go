package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/httplimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// exactUpstream allows capacity + rate x window in every window of its
// arrivals (an exact token bucket on them), answers 429 above it, and
// answers each call's cost in X-Cost. The tests give it one call more than
// the shared quota's capacity: the calls' jitter on their way to it.
type exactUpstream struct {
	mu       sync.Mutex
	rate     float64
	capacity float64
	tokens   float64
	last     time.Time
	ok       atomic.Int64
	tooMany  atomic.Int64
	cost     string
}

func (u *exactUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		return // a connection opened before the run, not a call
	}
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
		u.tooMany.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u.ok.Add(1)
	w.Header().Set("X-Cost", u.cost)
}

func outboundLimiter(t *testing.T, prefix string, q quota.Quota) *core.Limiter {
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

func oneCall(*http.Request) core.Request {
	return core.Request{Tenant: quota.Tenant{ID: "org"}, Class: "upstream", Cost: 1}
}

// Three limiters (as three processes) send through their transports to one
// upstream as fast as 12 goroutines go: it never answers 429, and gets
// nearly its whole quota.
func TestTransportWaitsItsTurn(t *testing.T) {
	q := quota.Quota{Capacity: 5, RefillPerSecond: 40}
	up := &exactUpstream{rate: q.RefillPerSecond, capacity: float64(q.Capacity) + 1, tokens: float64(q.Capacity) + 1, cost: "1"}
	srv := httptest.NewServer(up)
	defer srv.Close()
	var clients []*http.Client
	prefix := redistest.Prefix(t) // one set of buckets
	for range 3 {
		base := &http.Transport{MaxIdleConnsPerHost: 4}
		t.Cleanup(base.CloseIdleConnections)
		warm(t, base, srv.URL+"/warm", 4)
		clients = append(clients, &http.Client{Transport: httplimit.NewTransport(outboundLimiter(t, prefix, q), base, oneCall, nil)})
	}
	const run = 2 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%3]
			for time.Since(start) < run {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := c.Do(req)
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if up.tooMany.Load() != 0 || failed.Load() != 0 {
		t.Errorf("upstream answered %d 429s; %d calls failed", up.tooMany.Load(), failed.Load())
	}
	bound := float64(q.Capacity) + q.RefillPerSecond*elapsed.Seconds()
	if got := float64(up.ok.Load()); got > bound+1 || got < 0.9*bound {
		t.Errorf("upstream got %v calls in %v, want 0.9 to 1 x %.1f", got, elapsed, bound)
	}
	t.Logf("%d calls in %v (bound %.1f)", up.ok.Load(), elapsed, bound)
}

// A request the quota cannot admit before its context's deadline is not
// sent; the cost function settles the reservation from the response.
func TestTransportRefusesAndSettles(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 0.01}
	up := &exactUpstream{rate: 1000, capacity: 1000, tokens: 1000, cost: "1"}
	srv := httptest.NewServer(up)
	defer srv.Close()
	lim := outboundLimiter(t, redistest.Prefix(t), q)
	tr := httplimit.NewTransport(lim, nil, func(*http.Request) core.Request {
		return core.Request{Tenant: quota.Tenant{ID: "org"}, Class: "upstream", Cost: 5}
	}, func(r *http.Response) (int64, bool) {
		n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		return n, err == nil
	})
	c := &http.Client{Transport: tr}
	for range 2 { // 5 reserved, 1 used: 4 back each time
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	d, err := lim.Peek(t.Context(), quota.Tenant{ID: "org"}, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	if d.Tokens < 8 || d.Tokens > 8.1 {
		t.Fatalf("after two calls of estimate 5 that cost 1: %v tokens, want 8", d.Tokens)
	}
	// drain the bucket, then a call whose deadline comes before the refill
	if _, err := lim.Allow(t.Context(), quota.Tenant{ID: "org"}, "upstream", 8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err = c.Do(req)
	if !errors.Is(err, httplimit.ErrNotSent) {
		t.Fatalf("a call the quota cannot admit in time: %v", err)
	}
	if up.ok.Load() != 2 {
		t.Fatalf("the upstream got %d calls, want 2", up.ok.Load())
	}
}

// warm opens n connections of base to url before the run (straight, not
// through the limiter): a dial delays a call past its time and bunches it
// with the next.
func warm(t *testing.T, base *http.Transport, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if resp, err := base.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}
