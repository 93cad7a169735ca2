package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/examples/internal/app"
)

// writeConfig writes a tier file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bucketReader reads the services' buckets from their Redis (the default
// key prefix) with a limiter of its own on the same tier file: Peek, which
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
	r, err := core.NewResolver(cfg.Tiers)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(redistest.Client(t), r, core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return &bucketReader{lim: lim}
}

// balance is the tenant's llm balance now, exact (negative: a debt).
func (b *bucketReader) balance(t *testing.T, tenant, tier string) float64 {
	t.Helper()
	d, err := b.lim.Peek(t.Context(), core.Tenant{ID: tenant, Tier: tier}, app.ClassLLM)
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
				var p core.Problem
				if a.status != http.StatusBadRequest || a.header.Get("Content-Type") != core.ProblemContentType ||
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
			var p core.Problem
			if json.Unmarshal([]byte(a.body), &p) != nil || !slices.Equal(p.ViolatedPolicies, []string{app.ClassLLM}) || a.header.Get("X-RateLimit-Remaining") != "0" {
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

// killConfig: one llm bucket that refills so slowly (1 token in 1000 s)
// that what the test reads is what was charged.
const (
	killRefill = 0.001
	killConfig = `version: 1
default_tier: free
failure_policy: closed
timeout: 2s
tiers:
  free:
    classes:
      llm: {capacity: 1000, refill_per_second: 0.001}
routes:
  - {method: POST, path: /v1/complete, class: llm, cost: 100}
  - {method: GET, path: /healthz, exempt: true}
`
)

// A process killed (SIGKILL) between reserve and settle leaves exactly the
// estimate charged: its handler has reported the actual cost (900) and
// waits; the bucket in Redis shows 100 charged, not 900 (a settle) nor 0 (a
// refund). Beside it, the same helper whose handler returns (its client
// gives up) settles to 900: the kill, not the helper, is what kept the
// estimate.
func TestKilledBeforeSettle(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, killConfig)
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
