// Command replicas is tollgate's demo: why a shared limiter exists.
//
// It starts N replicas of one HTTP service behind a round-robin load
// balancer, all in this process, and drives one tenant's traffic through
// them twice: first with an in-process limiter in each replica
// (golang.org/x/time/rate), then with tollgate's shared bucket in Redis. The
// in-process limiters admit about N times the configured limit; the shared
// bucket admits the limit, whatever N is.
//
// It uses the Redis at REDIS_URL when set, else an embedded in-process
// Redis-compatible server (miniredis), and says which. It exits 0 only if the
// shared limiter held the token-bucket bound.
//
//	go run ./replicas -replicas 4
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"golang.org/x/time/rate"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

type result struct {
	mode     string
	admitted int64
	sent     int64
	elapsed  time.Duration
}

func run() error {
	replicas := flag.Int("replicas", 4, "number of service replicas behind the load balancer")
	capacity := flag.Int64("capacity", 20, "bucket capacity (burst), tokens")
	refill := flag.Float64("rate", 5, "refill rate, tokens per second")
	duration := flag.Duration("duration", 4*time.Second, "how long to drive traffic in each mode")
	rps := flag.Int("rps", 200, "requests per second the tenant sends")
	flag.Parse()
	if *replicas < 1 || *capacity < 1 || *refill <= 0 || *rps < 1 || *duration <= 0 {
		return fmt.Errorf("flags must be positive")
	}

	client, where, stop, err := connect()
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("tollgate demo: %d replicas, limit %d burst + %g/s for one tenant, %d req/s for %v\n",
		*replicas, *capacity, *refill, *rps, *duration)
	fmt.Printf("store: %s\n\n", where)

	quota := core.Quota{Capacity: *capacity, RefillPerSecond: *refill}
	tiers := core.Tiers{Default: "demo", Tiers: map[string]core.Tier{"demo": {Classes: map[string]core.Quota{"default": quota}}}}
	resolver, err := core.NewResolver(tiers)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("demo%d", time.Now().UnixNano())
	lim, err := core.New(client, resolver, core.WithPrefix(prefix), core.WithFailurePolicy(core.FailClosed), core.WithTimeout(time.Second))
	if err != nil {
		return err
	}

	local := func() http.Handler {
		var mu sync.Mutex
		perTenant := map[string]*rate.Limiter{}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant := r.Header.Get("Authorization") // the demo's stand-in for a verified token
			mu.Lock()
			l, ok := perTenant[tenant]
			if !ok {
				l = rate.NewLimiter(rate.Limit(*refill), int(*capacity))
				perTenant[tenant] = l
			}
			mu.Unlock()
			if !l.Allow() {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
	}
	shared := func() http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := lim.Allow(r.Context(), core.Tenant{ID: r.Header.Get("Authorization")}, "default", 1)
			for _, h := range d.Headers(core.DefaultHeaderStyle, time.Now()) {
				w.Header().Set(h.Name, h.Value)
			}
			if !d.Allowed {
				w.WriteHeader(d.Status())
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
	}

	var results []result
	for _, m := range []struct {
		name string
		mk   func() http.Handler
	}{{"in-process", local}, {"shared (tollgate)", shared}} {
		res, err := drive(m.name, *replicas, m.mk, *rps, *duration)
		if err != nil {
			return err
		}
		results = append(results, res)
	}

	fmt.Printf("\n%-18s %8s %10s %9s %9s %7s\n", "mode", "replicas", "limit", "sent", "admitted", "ratio")
	ok := true
	for _, r := range results {
		bound := float64(*capacity) + *refill*r.elapsed.Seconds()
		fmt.Printf("%-18s %8d %10.0f %9d %9d %6.2fx\n", r.mode, *replicas, bound, r.sent, r.admitted, float64(r.admitted)/bound)
		if r.mode != "in-process" && float64(r.admitted) > bound {
			ok = false
		}
	}
	fmt.Println()
	if !ok {
		return fmt.Errorf("the shared limiter admitted more than capacity + rate x elapsed")
	}
	fmt.Printf("The in-process limiters admit about %dx the limit; the shared bucket holds it for any number of replicas.\n", *replicas)
	return nil
}

// drive starts n replicas behind a round-robin balancer and sends one
// tenant's traffic at rps for d.
func drive(mode string, n int, mk func() http.Handler, rps int, d time.Duration) (result, error) {
	servers := make([]*httptest.Server, n)
	for i := range servers {
		servers[i] = httptest.NewServer(mk())
		defer servers[i].Close()
	}
	var next atomic.Uint64
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := servers[next.Add(1)%uint64(n)]
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target.URL+r.URL.Path, nil)
		req.Header = r.Header.Clone()
		resp, err := target.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer lb.Close()

	var sent, admitted atomic.Int64
	var wg sync.WaitGroup
	ticker := time.NewTicker(time.Second / time.Duration(rps))
	defer ticker.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	progress := time.NewTicker(250 * time.Millisecond)
	defer progress.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-progress.C:
			fmt.Printf("\r%-18s %5.1fs sent %5d admitted %5d", mode, time.Since(start).Seconds(), sent.Load(), admitted.Load())
		case <-ticker.C:
			wg.Add(1)
			sent.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodGet, lb.URL+"/v1/profile", nil)
				req.Header.Set("Authorization", "tenant-42")
				resp, err := lb.Client().Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					admitted.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Printf("\r%-18s %5.1fs sent %5d admitted %5d\n", mode, elapsed.Seconds(), sent.Load(), admitted.Load())
	return result{mode: mode, admitted: admitted.Load(), sent: sent.Load(), elapsed: elapsed}, nil
}

// connect returns the Redis at REDIS_URL, or an embedded miniredis.
func connect() (redis.UniversalClient, string, func(), error) {
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		c := redis.NewClient(opt)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL %s: %w", opt.Addr, err)
		}
		return c, "Redis at " + opt.Addr + " (REDIS_URL)", func() { _ = c.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, fmt.Errorf("embedded server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, "embedded in-process Redis-compatible server (miniredis; set REDIS_URL for a real Redis)", func() { _ = c.Close(); m.Close() }, nil
}
