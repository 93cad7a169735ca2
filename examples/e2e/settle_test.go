package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/httplimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// writeConfig writes a tier file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := t.TempDir() + "/tollgate.yaml"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bucketReader reads the services' buckets from their Redis (the tests'
// key prefix, testPrefix) with a limiter of its own on the same tier file: Peek, which
// charges nothing.
type bucketReader struct {
	lim *core.Limiter
}

func newBucketReader(t *testing.T, configPath string) *bucketReader {
	t.Helper()
	cfg, err := config.Load(configPath)
	if err != nil {
		t.Fatal(err)
	}
	r, err := quota.NewResolver(cfg.Tiers)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(redistest.Client(t), r, core.WithTimeout(10*time.Second), core.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return &bucketReader{lim: lim}
}

// balance is the tenant's llm balance now, exact (negative: a debt).
func (b *bucketReader) balance(t *testing.T, tenant, tier string) float64 {
	t.Helper()
	d, err := b.lim.Peek(t.Context(), quota.Tenant{ID: tenant, Tier: tier}, app.ClassLLM)
	if err != nil {
		t.Fatalf("peek %s: %v", tenant, err)
	}
	return d.Tokens
}

// token signs a token for tenant on tier as the mint command does (the
// tests that start no example need not build it).
func token(t *testing.T, tenant, tier string) string {
	t.Helper()
	tok, err := app.Mint([]byte(secret), tenant, tier, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// post sends POST /v1/complete with body and reads the answer.
func post(t *testing.T, c *http.Client, base, authorization, body string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+app.PathComplete, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authorization)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", app.PathComplete, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatalf("POST %s: read body: %v", app.PathComplete, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: strings.TrimSpace(buf.String())}
}

// The free tier's llm quota in tollgate.yaml, and the route's estimate.
const (
	llmCapacity = 1000
	llmRefill   = 10.0
	llmEstimate = 100
)

// Reserve, then settle, on each HTTP example as a real process: a bad body
// is a 400 and its estimate stands; a completion's bucket, read from
// Redis, is settled to capacity - N (within what refilled); a completion
// costing more than the balance leaves a debt, and the tenant's next
// request is a 429 whose Retry-After counts it.
func TestHTTPExamplesSettle(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	binaries(t)
	// the examples' tiers and routes, with a check timeout that a loaded
	// machine meets (a check that failed open would leave nothing to
	// settle: the failure policy at work, not the settle)
	cfg := patientConfig(t)
	peek := newBucketReader(t, cfg)

	runs := make([]*run, len(httpExamples))
	for i, name := range httpExamples {
		addr := freeAddr(t)
		runs[i] = &run{name: name, base: "http://" + addr,
			p: start(t, name, "ADDR="+addr, "REDIS_URL="+redisURL, "TOLLGATE_JWT_SECRET="+secret,
				"TOLLGATE_CONFIG="+cfg, "DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")}
		tenant := tenantID(t, name+"-llm")
		runs[i].tenants = map[string]string{freeToken: tenant}
		runs[i].tokens = map[string]string{freeToken: "Bearer " + mint(t, secret, tenant, "free")}
	}
	for _, r := range runs {
		waitHealthy(t, r.p, r.base+app.PathHealth)
	}

	c := newClient(t)
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			tenant, auth := r.tenants[freeToken], r.tokens[freeToken]
			began := time.Now()
			// want checks the balance against what the requests so far
			// charged: at least that, at most that plus what refilled
			want := func(what string, charged float64) float64 {
				t.Helper()
				got := peek.balance(t, tenant, "free")
				if refilled := llmRefill * time.Since(began).Seconds(); got < llmCapacity-charged-1e-6 || got > llmCapacity-charged+refilled+1e-6 {
					t.Errorf("%s: balance %.3f in Redis, want %v (+ up to %.3f refilled)", what, got, llmCapacity-charged, refilled)
				}
				return got
			}

			for _, body := range []string{`not json`, `{"tokens": -1}`, `{"tokens": 100001}`} {
				a := post(t, c.c, r.base, auth, body)
				var p render.Problem
				if a.status != http.StatusBadRequest || a.header.Get("Content-Type") != render.ProblemContentType ||
					json.Unmarshal([]byte(a.body), &p) != nil || !strings.Contains(p.Detail, `{"tokens": N}`) {
					t.Errorf("body %s: %d %s %s, want a 400 problem saying what the body must be", body, a.status, a.header.Get("Content-Type"), a.body)
				}
			}
			want("3 bad bodies (their estimates stand)", 3*llmEstimate)

			a := post(t, c.c, r.base, auth, `{"tokens": 350}`)
			if a.status != http.StatusOK || a.body != `{"tenant":"`+tenant+`","tokens":350}` {
				t.Errorf("completion: %d %s", a.status, a.body)
			}
			// the headers are written before the settle: they show the
			// estimate charged
			if rem, err := strconv.Atoi(a.header.Get("X-RateLimit-Remaining")); err != nil || rem < 600 || float64(rem) > 600+llmRefill*time.Since(began).Seconds() {
				t.Errorf("completion: X-RateLimit-Remaining %q, want 600 (the balance after the estimate)", a.header.Get("X-RateLimit-Remaining"))
			}
			want("settled to 350", 3*llmEstimate+350)

			// 350 left: the reservation of 100 is admitted, the settle to
			// 1200 leaves a debt of 850
			if a := post(t, c.c, r.base, auth, `{"tokens": 1200}`); a.status != http.StatusOK {
				t.Errorf("completion beyond the balance: %d %s", a.status, a.body)
			}
			debt := want("settled to 1200: a debt", 3*llmEstimate+350+1200)

			a = post(t, c.c, r.base, auth, `{"tokens": 1}`)
			if a.status != http.StatusTooManyRequests {
				t.Fatalf("while in debt: %d %s, want 429", a.status, a.body)
			}
			// the estimate needs (100 - balance) / 10 s: about 95 s, less
			// what refilled since the debt was read
			ra, err := strconv.Atoi(a.header.Get("Retry-After"))
			if most := math.Ceil((llmEstimate - debt) / llmRefill); err != nil || float64(ra) > most || float64(ra) < most-1-time.Since(began).Seconds() {
				t.Errorf("while in debt: Retry-After %q, want about %v", a.header.Get("Retry-After"), most)
			}
			var p render.Problem
			if json.Unmarshal([]byte(a.body), &p) != nil || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != app.ClassLLM || a.header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("while in debt: body %s, X-RateLimit-Remaining %q; want the llm policy named, 0 remaining", a.body, a.header.Get("X-RateLimit-Remaining"))
			}
			want("the denial charged nothing", 3*llmEstimate+350+1200)
		})
	}
	c.tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			t.Run("stop "+r.name, func(t *testing.T) { stop(t, r.p) })
		})
	}
	wg.Wait()
}

// llmConfig is a tier file with one llm bucket and the completion route
// costing estimate; checks fail closed, within a timeout a loaded machine
// meets, so that every admission charged the store.
func llmConfig(capacity int, refill float64, estimate int) string {
	return fmt.Sprintf(`version: 1
default_tier: free
failure_policy: closed
timeout: 2s
tiers:
  free:
    classes:
      llm: {capacity: %d, refill_per_second: %g}
routes:
  - {method: POST, path: /v1/complete, class: llm, cost: %d}
  - {method: GET, path: /healthz, exempt: true}
`, capacity, refill, estimate)
}

// killRefill: the killed process's bucket refills so slowly (1 token in
// 1000 s) that what the test reads is what was charged.
const killRefill = 0.001

// A process killed (SIGKILL) between reserve and settle leaves exactly the
// estimate charged: its handler has reported the actual cost (900) and
// waits; the bucket in Redis shows 100 charged, not 900 (a settle) nor 0 (a
// refund). Beside it, the same helper whose handler returns (its client
// gives up) settles to 900: the kill, not the helper, is what kept the
// estimate.
func TestKilledBeforeSettle(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, llmConfig(1000, killRefill, 100))
	peek := newBucketReader(t, cfg)
	addr := freeAddr(t)
	p := startHelper(t, "hold", "ADDR="+addr, "REDIS_URL="+redistest.URL(t), "TOLLGATE_JWT_SECRET="+secret,
		"TOLLGATE_CONFIG="+cfg, "DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")
	base := "http://" + addr
	killed, settled := tenantID(t, "killed"), tenantID(t, "settled")
	waitHealthy(t, p, base+app.PathHealth)

	// hold sends a completion of 900 tokens for tenant and returns once the
	// handler has reported it, and a function that ends the request.
	hold := func(tenant string) (end func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), holdFor)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+app.PathComplete, strings.NewReader(`{"tokens": 900}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token(t, tenant, "free"))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
		deadline := time.Now().Add(startWithin)
		for !strings.Contains(p.out.String(), "reported "+tenant+" 900\n") {
			if time.Now().After(deadline) || p.exited() {
				cancel()
				t.Fatalf("the handler did not report the cost within %v", startWithin)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return func() { cancel(); <-done }
	}
	began := time.Now()
	check := func(what, tenant string, charged float64) {
		t.Helper()
		got := peek.balance(t, tenant, "free")
		if refilled := killRefill * time.Since(began).Seconds(); got < 1000-charged-1e-9 || got > 1000-charged+refilled+1e-9 {
			t.Errorf("%s: balance %.4f in Redis, want %v charged (1000 - %v, + up to %.4f refilled)", what, got, charged, charged, refilled)
		}
	}

	// the control: a request whose handler returns is settled to 900
	end := hold(settled)
	check("reserved", settled, 100)
	end()
	deadline := time.Now().Add(startWithin)
	for peek.balance(t, settled, "free") > 500 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the settle runs once the handler has seen its client go
	}
	check("settled when the handler returned", settled, 900)

	end = hold(killed)
	defer end()
	check("reserved", killed, 100)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(stopWithin):
		t.Fatalf("the helper did not die within %v of SIGKILL", stopWithin)
	}
	check("killed before the settle", killed, 100)
}

// helperRole, in a process's environment, makes this test binary a helper
// service instead of running the tests: the examples' own wiring (app.Open
// reads ADDR, REDIS_URL, TOLLGATE_CONFIG, ... as an example does) serving
// POST /v1/complete in a way no example does:
//
//   - "hold": as the examples (httplimit, the gate with cost reports), but
//     the handler reports the body's tokens, prints "reported <tenant> <n>"
//     and then waits for the client to go away (at most holdFor) before it
//     returns: a process to kill between reserve and settle.
//   - "estimate": the route's cost charged and never settled (a gate
//     without gate.WithCostReports, so the handler's report is refused):
//     charging the estimate only.
//   - "after": a check of cost 0 before the handler and, once the answer
//     is written, a plain charge of the body's tokens (Limiter.Allow):
//     charging after the response only.
const helperRole = "TOLLGATE_E2E_HELPER"

// holdFor bounds how long a "hold" handler waits.
const holdFor = 2 * time.Minute

func runHelper(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveHelper(ctx, role); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
		return 1
	}
	return 0
}

func serveHelper(ctx context.Context, role string) error {
	a, err := app.Open(ctx, app.FromEnv("e2e-"+role, nil))
	if err != nil {
		return err
	}
	defer a.Close()
	var h http.Handler
	switch role {
	case "hold":
		h = httplimit.Middleware(a.Gate)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := app.ParseTokens(r.Body)
			if err == nil {
				err = gate.ReportCost(r.Context(), n)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t, _ := gate.TenantFromContext(r.Context())
			fmt.Printf("reported %s %d\n", t.ID, n)
			timer := time.NewTimer(holdFor)
			defer timer.Stop()
			select {
			case <-r.Context().Done():
			case <-timer.C:
			}
		}))
	case "estimate":
		g, err := gate.New(a.Limiter, a.File.GateOptions()...)
		if err != nil {
			return err
		}
		h = httplimit.Middleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeAnswer(w)(a.Complete(r.Context(), r.Body))
		}))
	case "after":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t, _ := gate.TenantFromContext(r.Context())
			if d, err := a.Limiter.Check(r.Context(), core.Request{Tenant: t, Class: app.ClassLLM}); err != nil || !d.Allowed {
				http.Error(w, "denied", http.StatusTooManyRequests)
				return
			}
			n, err := app.ParseTokens(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			_, _ = a.Limiter.Allow(r.Context(), t, app.ClassLLM, n)
		})
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+app.PathHealth, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	mux.Handle("POST "+app.PathComplete, a.Auth.RequireTenant(h))
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		return err
	}
	return app.ServeHTTP(ctx, ln, mux)
}

func writeAnswer(w http.ResponseWriter) func(status int, contentType string, body []byte) {
	return func(status int, contentType string, body []byte) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// The bound of reserve-then-settle on real processes (docs/semantics.md,
// "The bound"): boundReplicas replicas of one service, boundClients clients
// sending completions whose true cost is uniform in [1, boundMaxCost] with
// a fixed estimate of boundEstimate, one tenant. The settled usage of the
// admitted requests never exceeds C + ρT + Σ(a - e) over the requests in
// flight at the last admission, and the store (read from Redis) is charged
// exactly that usage. Beside it, on the same stream of costs, the two
// patterns users have without settle: charging the estimate only, and
// charging after the response only (a check of cost 0, then a plain
// charge).
const (
	boundReplicas = 4
	boundClients  = 64
	boundEstimate = 200
	boundMaxCost  = 1000
	// boundCapacity exceeds boundClients × (boundMaxCost - boundEstimate),
	// the most debt the requests in flight can leave: no charge is ever
	// forgiven, so the store must show every token of the usage.
	boundCapacity = 60_000
	boundRefill   = 10_000.0
	// boundRequests keeps the run well under half a minute on a loaded
	// machine; TOLLGATE_SETTLE_REQUESTS=10000 (make test-settle) is the
	// full run
	boundRequests    = 1000
	boundRequestsEnv = "TOLLGATE_SETTLE_REQUESTS"
)

// entry is one request of the ledger, as the client saw it: its true cost,
// when it was sent and its answer read (since the run's start), its status.
type entry struct {
	actual       int64
	sent, answer time.Duration
	status       int
}

// pattern is one way of charging, on its own replicas and tenant.
type pattern struct {
	name   string
	procs  []*process
	bases  []string
	tenant string
	ledger []entry
	// from Redis: the bucket's balance at the run's start (a peek, its
	// stamp) and at its last charge (the stored state)
	start, last       core.BucketState
	began, ended      time.Time
	firstAdmittedWait time.Duration // from the start's peek to the first admission's answer
}

func TestSettleBound(t *testing.T) {
	total := boundRequests
	if s := os.Getenv(boundRequestsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < boundClients {
			t.Fatalf("%s=%q: want a number of requests >= %d", boundRequestsEnv, s, boundClients)
		}
		total = n
	}
	t.Parallel()
	redisURL := redistest.URL(t)
	cfg := writeConfig(t, llmConfig(boundCapacity, boundRefill, boundEstimate))
	peek := newBucketReader(t, cfg)
	env := func(addr string) []string {
		return []string{"ADDR=" + addr, "REDIS_URL=" + redisURL, "TOLLGATE_JWT_SECRET=" + secret,
			"TOLLGATE_CONFIG=" + cfg, "DATABASE_URL=sqlite://" + t.TempDir() + "/overrides.db"}
	}
	patterns := []*pattern{{name: "reserve, settle"}, {name: "estimate only"}, {name: "charge after"}}
	for i, p := range patterns {
		p.tenant = tenantID(t, "bound"+strconv.Itoa(i))
		for range boundReplicas {
			addr := freeAddr(t)
			p.bases = append(p.bases, "http://"+addr)
			switch i {
			case 0: // the example itself
				p.procs = append(p.procs, start(t, "nethttp", env(addr)...))
			case 1:
				p.procs = append(p.procs, startHelper(t, "estimate", env(addr)...))
			case 2:
				p.procs = append(p.procs, startHelper(t, "after", env(addr)...))
			}
		}
	}
	for _, p := range patterns {
		for i, proc := range p.procs {
			waitHealthy(t, proc, p.bases[i]+app.PathHealth)
		}
	}
	// the same stream of true costs for each pattern
	actuals := make([]int64, total)
	rng := rand.New(rand.NewPCG(25, 2026))
	for i := range actuals {
		actuals[i] = 1 + rng.Int64N(boundMaxCost)
	}

	for _, p := range patterns {
		drive(t, p, peek, actuals)
		if strings.Contains(p.name, "after") {
			// its charges run after the answers: every one is done once
			// the replicas have shut down gracefully
			for _, proc := range p.procs {
				stop(t, proc)
			}
		}
		p.last = storedState(t, p.tenant)
	}

	t.Logf("%d requests per pattern, %d clients, %d replicas, estimate %d, true cost uniform in [1, %d], capacity %d, refill %g/s",
		total, boundClients, boundReplicas, boundEstimate, boundMaxCost, boundCapacity, boundRefill)
	t.Logf("%-16s %9s %8s %10s %12s %12s %12s %12s %10s", "pattern", "admitted", "elapsed", "C+ρT", "in flight", "true usage", "charged", "overshoot", "x bound")
	for i, p := range patterns {
		s := p.summarise()
		t.Logf("%-16s %9d %7.2fs %10.0f %12.0f %12d %12.0f %12.0f %9.2fx", p.name, s.admitted, s.elapsed.Seconds(), s.supply, s.inFlight,
			s.usage, s.charged, float64(s.usage)-(s.supply+s.inFlight), float64(s.usage)/(s.supply+s.inFlight))
		if s.errors > 0 {
			t.Errorf("%s: %d requests answered neither 200 nor 429", p.name, s.errors)
		}
		switch i {
		case 0:
			if s.admitted == 0 || s.admitted == int64(total) {
				t.Errorf("%s: %d of %d admitted: the limit never bound, or admitted nothing", p.name, s.admitted, total)
			}
			// the bound, at the end and at every admission
			if float64(s.usage) > s.supply+s.inFlight {
				t.Errorf("%s: usage %d above the bound C + ρT + in flight = %.0f + %.0f", p.name, s.usage, s.supply, s.inFlight)
			}
			if k, lhs, rhs := p.sweep(); k >= 0 {
				t.Errorf("%s: at admission #%d, usage of the requests surely admitted before it %d above its bound %.0f", p.name, k, lhs, rhs)
			}
			// the store charged exactly the usage (Σ a of the admitted)
			checkCharged(t, p, s, float64(s.usage))
		case 1:
			// the store charged the estimates, and nothing else
			checkCharged(t, p, s, float64(s.admitted*boundEstimate))
		}
	}
}

// drive sends the costs to p's replicas, round robin, from boundClients
// clients, each sending its next request once it has the last answer.
func drive(t *testing.T, p *pattern, peek *bucketReader, actuals []int64) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: boundClients, MaxConnsPerHost: boundClients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	auth := "Bearer " + token(t, p.tenant, "free")
	p.ledger = make([]entry, len(actuals))
	p.began = time.Now()
	d, err := peek.lim.Peek(t.Context(), quota.Tenant{ID: p.tenant, Tier: "free"}, app.ClassLLM)
	if err != nil || len(d.Buckets) != 1 || d.Buckets[0].Stamp.IsZero() || d.Tokens != boundCapacity {
		t.Fatalf("%s: the bucket at the start: %+v, %v; want full, with a stamp", p.name, d, err)
	}
	p.start = d.Buckets[0]
	next := make(chan int, len(actuals)) // the requests to send, in order
	for i := range actuals {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range boundClients {
		wg.Go(func() {
			for i := range next {
				e := &p.ledger[i]
				e.actual = actuals[i]
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.bases[i%len(p.bases)]+app.PathComplete,
					strings.NewReader(`{"tokens": `+strconv.FormatInt(e.actual, 10)+`}`))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Authorization", auth)
				e.sent = time.Since(p.began)
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					e.status = resp.StatusCode
				}
				e.answer = time.Since(p.began)
				if err != nil {
					e.status = -1
				}
			}
		})
	}
	wg.Wait()
	p.ended = time.Now()
	p.firstAdmittedWait = -1
	for _, e := range p.ledger {
		if e.status == http.StatusOK && (p.firstAdmittedWait < 0 || e.answer < p.firstAdmittedWait) {
			p.firstAdmittedWait = e.answer
		}
	}
}

// storedState reads the tenant's llm bucket as Redis stores it, "<tokens>
// <stamp>": its balance after its last charge and that charge's time by
// the Redis clock (docs/semantics.md, "Storage").
func storedState(t *testing.T, tenant string) core.BucketState {
	t.Helper()
	key := bucketKey(t, tenant, app.ClassLLM)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	v, err := redistest.Client(t).Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	tok, stamp, ok := strings.Cut(v, " ")
	tokens, err1 := strconv.ParseFloat(tok, 64)
	us, err2 := strconv.ParseInt(stamp, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("GET %s: %q is not \"<tokens> <stamp>\"", key, v)
	}
	return core.BucketState{Name: app.ClassLLM, Tokens: tokens, Stamp: time.UnixMicro(us)}
}

type summary struct {
	admitted, usage, errors int64
	elapsed                 time.Duration
	supply                  float64 // C + ρT
	inFlight                float64 // Σ (a - e)+ over the requests that may be in flight at the last admission
	charged                 float64 // from Redis
}

func (p *pattern) summarise() summary {
	var s summary
	s.elapsed = p.ended.Sub(p.began)
	s.supply = boundCapacity + boundRefill*s.elapsed.Seconds()
	var lastSent time.Duration // the last admission was no earlier than the last admitted request was sent
	for _, e := range p.ledger {
		switch e.status {
		case http.StatusOK:
			s.admitted++
			s.usage += e.actual
			lastSent = max(lastSent, e.sent)
		case http.StatusTooManyRequests:
		default:
			s.errors++
		}
	}
	for _, e := range p.ledger {
		if e.status == http.StatusOK && e.answer >= lastSent {
			s.inFlight += float64(max(e.actual-boundEstimate, 0))
		}
	}
	// the bucket was full at the start's peek; what refilled since, less
	// the balance after the last charge, is what was charged (less what a
	// full bucket could not take before the first admission: see
	// checkCharged)
	s.charged = p.start.Tokens + boundRefill*p.last.Stamp.Sub(p.start.Stamp).Seconds() - p.last.Tokens
	return s
}

// checkCharged: the store charged want, up to what a full bucket could not
// take. The bucket is full at the start's peek, and may be full again
// while the first requests' refunds and the refill outrun their charges
// (a refund never lifts it above capacity, the refill stops there): until
// the usage of the requests answered exceeds the refill since the start
// plus every client's estimate (what the requests in flight could still
// give back), after which it is below capacity for good. What it could not
// take meanwhile is at most the refill until then plus each of those
// requests' estimate. A charge twice or a settle lost is far beyond it (a
// whole Σ(a - e), or a whole estimate per admission).
func checkCharged(t *testing.T, p *pattern, s summary, want float64) {
	t.Helper()
	full := p.firstAdmittedWait // the start's peek to the first admission
	var usage, n int64
	for _, e := range p.ledgerByAnswer() {
		if e.status != http.StatusOK {
			continue
		}
		if float64(usage) > boundRefill*(p.firstAdmittedWait+e.answer).Seconds()+boundClients*boundEstimate {
			break
		}
		usage += e.actual
		n++
		full = p.firstAdmittedWait + e.answer
	}
	waste := boundRefill*full.Seconds() + float64(n*boundEstimate)
	if s.charged < want-1e-6*want || s.charged > want+waste+1e-6*want {
		t.Errorf("%s: Redis shows %.3f charged, want %.0f (+ up to %.1f a full bucket could not take while it could be full)",
			p.name, s.charged, want, waste)
	}
}

// ledgerByAnswer is the ledger in the order its answers came.
func (p *pattern) ledgerByAnswer() []entry {
	l := slices.Clone(p.ledger)
	slices.SortFunc(l, func(a, b entry) int { return cmp.Compare(a.answer, b.answer) })
	return l
}

// sweep checks the bound at every admission k (its answer a 200): the
// requests surely admitted before it (answered before it was sent), and k,
// used at most C + ρ × (k's answer) + Σ (a - e)+ over the requests whose
// time on the wire overlaps k's (those that may be in flight at k's
// admission). It returns the first k that breaks it, or -1.
func (p *pattern) sweep() (k int, lhs int64, rhs float64) {
	for k, ek := range p.ledger {
		if ek.status != http.StatusOK {
			continue
		}
		lhs, rhs = ek.actual, boundCapacity+boundRefill*ek.answer.Seconds()
		for _, e := range p.ledger {
			if e.status != http.StatusOK {
				continue
			}
			if e.answer < ek.sent {
				lhs += e.actual
			} else if e.sent <= ek.answer {
				rhs += float64(max(e.actual-boundEstimate, 0))
			}
		}
		if float64(lhs) > rhs {
			return k, lhs, rhs
		}
	}
	return -1, 0, 0
}

// The Gin example's debt bound (docs/semantics.md, "The bound"), on a
// quota scaled down so that a few seconds show it: capacity 10, refill 5/s,
// the completion route's estimate 1, and a tenant whose every completion
// reports 1,000 tokens (100 times the capacity), one request at a time.
//   - "free", no cap: the debt is carried in full, so the actual costs of
//     the admitted requests stay within C + ρT + one request's actual cost
//     over the window T (one admission: its debt of 990 takes 198 s to
//     repay).
//   - "capped", max_debt 10: the debt stops at 10 and what lies beyond is
//     forgiven: the tenant is admitted again after 2.2 s, and the tokens
//     forgiven appear in /metrics (tollgate_settles_forgiven) and in the
//     log; what was charged, the actual costs less the forgiven tokens,
//     stays within C + ρT + the cap.
func TestGinSettleDebtBound(t *testing.T) {
	const (
		capacity = 10
		refill   = 5.0
		estimate = 1
		actual   = 100 * capacity
		maxDebt  = 10
		window   = 5 * time.Second
	)
	t.Parallel()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
default_tier: free
failure_policy: closed
timeout: 2s
tiers:
  free:
    classes:
      llm: {capacity: %[1]d, refill_per_second: %[2]g}
  capped:
    classes:
      llm: {capacity: %[1]d, refill_per_second: %[2]g, max_debt: %[3]d}
routes:
  - {method: POST, path: /v1/complete, class: llm, cost: %[4]d}
  - {method: GET, path: /healthz, exempt: true}
`, capacity, refill, maxDebt, estimate))
	addr := freeAddr(t)
	base := "http://" + addr
	// a private Redis: the example writes under the production prefix
	srv := redistest.NewServer(t)
	p := start(t, "gin", "ADDR="+addr, "REDIS_URL="+srv.URL(), "TOLLGATE_JWT_SECRET="+secret,
		"TOLLGATE_CONFIG="+cfg, "DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")
	waitHealthy(t, p, base+app.PathHealth)
	c := newClient(t)
	body := fmt.Sprintf(`{"tokens": %d}`, actual)

	// drive sends completions for tenant one at a time until until says
	// stop, and returns the admissions and the time from the first send to
	// the last answer
	drive := func(tenant, tier string, until func(admitted int, elapsed time.Duration) bool) (admitted int, elapsed time.Duration) {
		auth := "Bearer " + token(t, tenant, tier)
		began := time.Now()
		for !until(admitted, time.Since(began)) {
			switch a := post(t, c.c, base, auth, body); a.status {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s: %d %s, want 200 or 429", tenant, a.status, a.body)
			}
			elapsed = time.Since(began)
			if used, bound := float64(admitted*actual), capacity+refill*elapsed.Seconds()+actual; tier == "free" && used > bound {
				t.Fatalf("%s: %d admitted in %v used %.0f tokens, above C + ρT + one request's actual cost = %.0f", tenant, admitted, elapsed, used, bound)
			}
			time.Sleep(20 * time.Millisecond) // one request at a time, not a flood
		}
		return admitted, elapsed
	}

	free := tenantID(t, "debtor")
	n, elapsed := drive(free, "free", func(_ int, e time.Duration) bool { return e >= window })
	t.Logf("no cap: %d admitted in %v, %d tokens used; bound C + ρT + a = %.0f", n, elapsed.Round(time.Millisecond), n*actual, capacity+refill*elapsed.Seconds()+actual)
	if n != 1 {
		t.Errorf("no cap: %d admitted in %v, want 1 (the debt of %d takes %.0fs to repay)", n, elapsed, actual-capacity, (actual-capacity)/refill)
	}

	// with the cap, two admissions: the second only after the capped debt
	// was repaid, within a bounded wait
	capped := tenantID(t, "capped")
	n, elapsed = drive(capped, "capped", func(admitted int, e time.Duration) bool {
		if e > 30*time.Second {
			t.Fatalf("capped: %d admitted in %v, want 2 (a debt of %d repaid in %.1fs)", admitted, e, maxDebt, (maxDebt+estimate)/refill)
		}
		return admitted == 2
	})
	var forgiven float64
	mc := newClient(t)
	r := mc.do(t, http.MethodGet, base+app.PathMetrics, "")
	mc.tr.CloseIdleConnections()
	for line := range strings.Lines(r.body) {
		if strings.HasPrefix(line, "tollgate_settles_forgiven") && strings.Contains(line, `tier="capped"`) && strings.Contains(line, `class="llm"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics: %q: %v", line, err)
			}
			forgiven += v
		} else if strings.HasPrefix(line, "tollgate_settles_forgiven") && strings.Contains(line, `tier="free"`) && !zeroSample(line) {
			t.Errorf("a debt without a cap was forgiven: %s", line)
		}
	}
	used := float64(n * actual)
	t.Logf("cap %d: %d admitted in %v, %.0f tokens used, %.0f forgiven", maxDebt, n, elapsed.Round(time.Millisecond), used, forgiven)
	// each settle took a balance of at most C - e down by a - e, the cap
	// stopping it at -10: at least a - C - 10 forgiven each
	if forgiven < float64(n*(actual-capacity-maxDebt)) {
		t.Errorf("tollgate_settles_forgiven{tier=\"capped\"} = %.0f, want at least %d (%d settles past the cap)\n%s", forgiven, n*(actual-capacity-maxDebt), n, r.body)
	}
	if charged, bound := used-forgiven, capacity+refill*elapsed.Seconds()+maxDebt; charged > bound {
		t.Errorf("capped: %.0f charged (%.0f used, %.0f forgiven), above C + ρT + the cap = %.0f", charged, used, forgiven, bound)
	}
	if out := p.out.String(); !strings.Contains(out, "a settle did not charge the whole actual cost") || !strings.Contains(out, "tenant="+capped) {
		t.Errorf("no log line for the forgiven settle of %s:\n%s", capped, out)
	}
	c.tr.CloseIdleConnections()
	stop(t, p)
}
