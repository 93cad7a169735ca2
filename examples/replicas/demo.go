package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/httplimit"
	"golang.org/x/time/rate"
)

// Options configure one run of the demo.
type Options struct {
	// Replicas is N, the number of replicas behind the balancer.
	Replicas int
	// Quota is the configured limit of the tenant.
	Quota quota.Quota
	// Duration is how long traffic is driven in each mode.
	Duration time.Duration
	// RPS is the rate the tenant sends at.
	RPS int
	// Prefix is the Redis key prefix of the shared buckets.
	Prefix string
	// Progress receives the live progress line; nil prints none.
	Progress io.Writer
	// Live rewrites the progress line in place (a terminal); otherwise a
	// line is printed each second.
	Live bool
}

// Limits on the options, so that a run ends within a minute.
const (
	MaxReplicas = 64
	MaxDuration = 25 * time.Second
	MaxRPS      = 5000
)

// Validate reports the first bad option.
func (o Options) Validate() error {
	switch {
	case o.Replicas < 1 || o.Replicas > MaxReplicas:
		return fmt.Errorf("-replicas %d: want 1 to %d", o.Replicas, MaxReplicas)
	case o.Duration < 100*time.Millisecond || o.Duration > MaxDuration:
		return fmt.Errorf("-duration %v: want 100ms to %v", o.Duration, MaxDuration)
	case o.RPS < 1 || o.RPS > MaxRPS:
		return fmt.Errorf("-rps %d: want 1 to %d", o.RPS, MaxRPS)
	}
	if err := o.Quota.Validate(); err != nil {
		return fmt.Errorf("-capacity/-rate: %w", err)
	}
	return nil
}

// Result is one mode's outcome.
type Result struct {
	Mode     string
	Replicas int
	Sent     int64
	Admitted int64
	Elapsed  time.Duration
	// Bound is the most a single token bucket of the configured quota can
	// admit in Elapsed: capacity + rate x elapsed.
	Bound float64
}

// Ratio is admitted over the bound: about N for N in-process limiters,
// at most 1 for a shared bucket.
func (r Result) Ratio() float64 { return float64(r.Admitted) / r.Bound }

// Held reports whether the mode kept the token-bucket bound (and admitted
// something, so that a limiter denying everything does not pass).
func (r Result) Held() bool { return r.Admitted > 0 && float64(r.Admitted) <= r.Bound }

// The demo's two modes.
const (
	ModeInProcess = "in-process"
	ModeShared    = "shared (tollgate)"
)

const demoTenant = "tenant-42"

// Run drives one tenant's traffic through N replicas twice, with an
// in-process limiter per replica and then with the shared bucket in client,
// and returns both results.
func Run(ctx context.Context, client redis.UniversalClient, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	secret := []byte(app.DevSecret)
	tiers := quota.Tiers{Default: "demo", Tiers: map[string]quota.Tier{"demo": {Classes: map[string]quota.Quota{quota.DefaultClass: o.Quota}}}}
	verifier, err := app.NewVerifier(secret, nil)
	if err != nil {
		return nil, err
	}
	token, err := app.Mint(secret, demoTenant, "demo", time.Hour)
	if err != nil {
		return nil, err
	}

	// Each replica authenticates the tenant from its token, as the examples
	// do, then limits it with a bucket in its own memory...
	inProcess := func() (http.Handler, func(), error) {
		var mu sync.Mutex
		buckets := map[string]*rate.Limiter{}
		limit := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t, _ := gate.TenantFromContext(r.Context())
				mu.Lock()
				b, ok := buckets[t.ID]
				if !ok {
					b = rate.NewLimiter(rate.Limit(o.Quota.RefillPerSecond), int(o.Quota.Capacity))
					buckets[t.ID] = b
				}
				mu.Unlock()
				if !b.Allow() {
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				next.ServeHTTP(w, r)
			})
		}
		return verifier.RequireTenant(limit(service())), func() {}, nil
	}
	// ...or with tollgate: its own limiter, the shared bucket in Redis.
	shared := func() (http.Handler, func(), error) {
		resolver, err := quota.NewResolver(tiers)
		if err != nil {
			return nil, nil, err
		}
		lim, err := core.New(client, resolver, core.WithPrefix(o.Prefix), core.WithFailurePolicy(core.FailClosed), core.WithTimeout(time.Second))
		if err != nil {
			return nil, nil, err
		}
		g, err := gate.New(lim)
		if err != nil {
			return nil, nil, err
		}
		mw := httplimit.Middleware(g)
		return verifier.RequireTenant(mw(service())), func() { _ = lim.Close() }, nil
	}

	var results []Result
	for _, m := range []struct {
		name string
		mk   func() (http.Handler, func(), error)
	}{{ModeInProcess, inProcess}, {ModeShared, shared}} {
		r, err := drive(ctx, m.name, m.mk, "Bearer "+token, o)
		if err != nil {
			return results, fmt.Errorf("%s: %w", m.name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// service is the replicas' API: one cheap endpoint.
func service() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+app.PathProfile, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// drive starts N replicas behind a round-robin balancer and sends the
// tenant's traffic at o.RPS for o.Duration.
func drive(ctx context.Context, mode string, mk func() (http.Handler, func(), error), authorization string, o Options) (Result, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	servers := make([]*httptest.Server, o.Replicas)
	for i := range servers {
		h, stop, err := mk()
		if err != nil {
			return Result{}, err
		}
		defer stop()
		servers[i] = httptest.NewServer(h)
		defer servers[i].Close()
	}
	lb := balancer(servers, transport)
	defer lb.Close()
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}

	var sent, admitted, failed atomic.Int64
	var wg sync.WaitGroup
	p := progress{w: o.Progress, live: o.Live, mode: mode}
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	ticker := time.NewTicker(time.Second / time.Duration(o.RPS))
	defer ticker.Stop()
	tick := time.NewTicker(p.interval())
	defer tick.Stop()
	start := time.Now()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
			// A tick due as the run ends (the ticker and the deadline
			// fire together) is left to the final "done" line, which
			// would otherwise repeat it.
			if elapsed := time.Since(start); o.Duration-elapsed > p.interval()/2 {
				p.print(elapsed, sent.Load(), admitted.Load(), false)
			}
		case <-ticker.C:
			wg.Add(1)
			sent.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lb.URL+app.PathProfile, nil)
				req.Header.Set("Authorization", authorization)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
				default:
					failed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	p.print(elapsed, sent.Load(), admitted.Load(), true)
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if n := failed.Load(); n > 0 {
		return Result{}, fmt.Errorf("%d of %d requests failed (neither 200 nor 429): is Redis answering?", n, sent.Load())
	}
	return Result{Mode: mode, Replicas: o.Replicas, Sent: sent.Load(), Admitted: admitted.Load(), Elapsed: elapsed,
		Bound: float64(o.Quota.Capacity) + o.Quota.RefillPerSecond*elapsed.Seconds()}, nil
}

// progress prints the live progress line: rewritten in place on a
// terminal, one line a second otherwise (a log or a CI console).
type progress struct {
	w    io.Writer
	live bool
	mode string
}

func (p progress) interval() time.Duration {
	if p.live {
		return 200 * time.Millisecond
	}
	return time.Second
}

func (p progress) print(elapsed time.Duration, sent, admitted int64, final bool) {
	if p.w == nil {
		return
	}
	line := fmt.Sprintf("%-18s %5.1fs  sent %6d  admitted %6d", p.mode, elapsed.Seconds(), sent, admitted)
	if final {
		line += "  done"
	}
	switch {
	case p.live && final:
		fmt.Fprintf(p.w, "\r%s\n", line)
	case p.live:
		fmt.Fprintf(p.w, "\r%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// WriteTable prints the results as the demo's table.
func WriteTable(w io.Writer, q quota.Quota, results []Result) {
	fmt.Fprintf(w, "%-18s %8s %12s %8s %8s %9s %7s\n", "mode", "replicas", "limit", "bound", "sent", "admitted", "ratio")
	for _, r := range results {
		fmt.Fprintf(w, "%-18s %8d %12s %8.0f %8d %9d %6.2fx\n", r.Mode, r.Replicas, limitString(q), r.Bound, r.Sent, r.Admitted, r.Ratio())
	}
}

func limitString(q quota.Quota) string {
	return fmt.Sprintf("%d+%g/s", q.Capacity, q.RefillPerSecond)
}

// errBoundBroken is returned when the shared limiter did not hold.
var errBoundBroken = errors.New("the shared limiter did not hold the token-bucket bound (admitted <= capacity + rate x elapsed, and > 0)")

// ConcurrencyOptions configure the demo's second table: one tenant's
// callers keep Callers requests open at once through Replicas replicas,
// whose handlers take Hold each; the class allows Limit in flight.
type ConcurrencyOptions struct {
	Replicas int
	Limit    int64
	Callers  int
	Hold     time.Duration
	Duration time.Duration
	Prefix   string
}

// Limits on the concurrency options.
const (
	MaxLimit   = 64
	MaxCallers = 512
	MaxHold    = time.Second
)

// Validate reports the first bad option.
func (o ConcurrencyOptions) Validate() error {
	switch {
	case o.Replicas < 1 || o.Replicas > MaxReplicas:
		return fmt.Errorf("-replicas %d: want 1 to %d", o.Replicas, MaxReplicas)
	case o.Limit < 1 || o.Limit > MaxLimit:
		return fmt.Errorf("-concurrency %d: want 1 to %d", o.Limit, MaxLimit)
	case o.Callers < 1 || o.Callers > MaxCallers:
		return fmt.Errorf("-callers %d: want 1 to %d", o.Callers, MaxCallers)
	case o.Hold < time.Millisecond || o.Hold > MaxHold:
		return fmt.Errorf("-hold %v: want 1ms to %v", o.Hold, MaxHold)
	case o.Duration < 100*time.Millisecond || o.Duration > MaxDuration:
		return fmt.Errorf("-duration %v: want 100ms to %v", o.Duration, MaxDuration)
	}
	return nil
}

// ConcurrencyResult is one mode's outcome in the second table.
type ConcurrencyResult struct {
	Mode     string
	Replicas int
	Limit    int64
	Sent     int64
	Admitted int64
	// Peak is the most handlers of the tenant running at once across the
	// fleet, as the handlers themselves counted.
	Peak int64
}

// Held reports whether the mode kept the fleet-wide limit (and admitted
// something, so that a limiter denying everything does not pass).
func (r ConcurrencyResult) Held() bool { return r.Admitted > 0 && r.Peak <= r.Limit }

// inFlight counts the handlers running at once across the fleet and keeps
// the peak.
type inFlight struct{ now, peak atomic.Int64 }

func (f *inFlight) handler(hold time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+app.PathProfile, func(w http.ResponseWriter, r *http.Request) {
		n := f.now.Add(1)
		for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
		}
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
		f.now.Add(-1)
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// RunConcurrency drives one tenant's concurrent callers through N replicas
// twice, with an in-process semaphore of Limit per replica and then with
// tollgate's fleet-wide slots, and returns both results.
func RunConcurrency(ctx context.Context, client redis.UniversalClient, o ConcurrencyOptions) ([]ConcurrencyResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	secret := []byte(app.DevSecret)
	// A rate quota that never binds: only the concurrency limit does. (Not
	// 1e6: the embedded server's Lua cannot parse "1e+06".)
	q := quota.Quota{Capacity: 100_000, RefillPerSecond: 100_000, Concurrency: o.Limit}
	tiers := quota.Tiers{Default: "demo", Tiers: map[string]quota.Tier{"demo": {Classes: map[string]quota.Quota{quota.DefaultClass: q}}}}
	verifier, err := app.NewVerifier(secret, nil)
	if err != nil {
		return nil, err
	}
	token, err := app.Mint(secret, demoTenant, "demo", time.Hour)
	if err != nil {
		return nil, err
	}
	var results []ConcurrencyResult
	for _, mode := range []string{ModeInProcess, ModeShared} {
		var f inFlight
		mk := func() (http.Handler, func(), error) {
			if mode == ModeInProcess {
				// One semaphore per replica (the demo has one tenant).
				sem := make(chan struct{}, o.Limit)
				next := f.handler(o.Hold)
				return verifier.RequireTenant(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case sem <- struct{}{}:
						defer func() { <-sem }()
						next.ServeHTTP(w, r)
					default:
						w.WriteHeader(http.StatusTooManyRequests)
					}
				})), func() {}, nil
			}
			resolver, err := quota.NewResolver(tiers)
			if err != nil {
				return nil, nil, err
			}
			lim, err := core.New(client, resolver, core.WithPrefix(o.Prefix), core.WithFailurePolicy(core.FailClosed), core.WithTimeout(time.Second))
			if err != nil {
				return nil, nil, err
			}
			g, err := gate.New(lim)
			if err != nil {
				_ = lim.Close()
				return nil, nil, err
			}
			return verifier.RequireTenant(httplimit.Middleware(g)(f.handler(o.Hold))), func() { _ = lim.Close() }, nil
		}
		sent, admitted, err := driveConcurrent(ctx, mk, "Bearer "+token, o)
		if err != nil {
			return results, fmt.Errorf("%s: %w", mode, err)
		}
		results = append(results, ConcurrencyResult{Mode: mode, Replicas: o.Replicas, Limit: o.Limit, Sent: sent, Admitted: admitted, Peak: f.peak.Load()})
	}
	return results, nil
}

// driveConcurrent starts N replicas behind a round-robin balancer and has
// o.Callers goroutines send the tenant's requests back to back for
// o.Duration; it returns how many were sent and admitted.
func driveConcurrent(ctx context.Context, mk func() (http.Handler, func(), error), authorization string, o ConcurrencyOptions) (int64, int64, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: 2 * MaxCallers, IdleConnTimeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	servers := make([]*httptest.Server, o.Replicas)
	for i := range servers {
		h, stop, err := mk()
		if err != nil {
			return 0, 0, err
		}
		defer stop()
		servers[i] = httptest.NewServer(h)
		defer servers[i].Close()
	}
	lb := balancer(servers, transport)
	defer lb.Close()
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}

	var sent, admitted, failed atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for range o.Callers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				// ctx, not runCtx: a request under way when the run ends
				// finishes, so its handler's count is complete.
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lb.URL+app.PathProfile, nil)
				req.Header.Set("Authorization", authorization)
				sent.Add(1)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					// Denied at once: wait a little before the next try,
					// as a client would, so the callers do not spin.
					t := time.NewTimer(o.Hold / 10)
					select {
					case <-t.C:
					case <-runCtx.Done():
						t.Stop()
					}
				default:
					failed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	if n := failed.Load(); n > 0 {
		return 0, 0, fmt.Errorf("%d of %d requests failed (neither 200 nor 429): is Redis answering?", n, sent.Load())
	}
	return sent.Load(), admitted.Load(), nil
}

// WriteConcurrencyTable prints the second table.
func WriteConcurrencyTable(w io.Writer, results []ConcurrencyResult) {
	fmt.Fprintf(w, "%-18s %8s %12s %8s %9s %14s\n", "mode", "replicas", "in flight", "sent", "admitted", "peak in flight")
	for _, r := range results {
		fmt.Fprintf(w, "%-18s %8d %12s %8d %9d %14d\n", r.Mode, r.Replicas, fmt.Sprintf("%d", r.Limit), r.Sent, r.Admitted, r.Peak)
	}
}

// errLimitBroken is returned when tollgate's slots did not hold the limit.
var errLimitBroken = errors.New("tollgate's slots did not hold the concurrency limit (peak in flight <= limit, and something admitted)")

// balancer is a round-robin load balancer in front of the replicas, as a
// fleet's would be.
func balancer(servers []*httptest.Server, transport http.RoundTripper) *httptest.Server {
	var next atomic.Uint64
	return httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			target := servers[next.Add(1)%uint64(len(servers))]
			r.Out.URL.Scheme, r.Out.URL.Host = "http", strings.TrimPrefix(target.URL, "http://")
		},
		Transport: transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	})
}
