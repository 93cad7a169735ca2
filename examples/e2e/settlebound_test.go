package e2e_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/examples/internal/app"
)

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

var boundConfig = fmt.Sprintf(`version: 1
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
`, boundCapacity, boundRefill, boundEstimate)

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
	cfg := writeConfig(t, boundConfig)
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
	d, err := peek.lim.Peek(t.Context(), core.Tenant{ID: p.tenant, Tier: "free"}, app.ClassLLM)
	if err != nil || len(d.Buckets) != 1 || d.Buckets[0].Stamp.IsZero() || d.Tokens != boundCapacity {
		t.Fatalf("%s: the bucket at the start: %+v, %v; want full, with a stamp", p.name, d, err)
	}
	p.start = d.Buckets[0]
	var next atomic.Int64
	var wg sync.WaitGroup
	for range boundClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(actuals) {
					return
				}
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
	keys, err := core.NewKeys(core.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keys.Bucket(tenant, app.ClassLLM)
	if err != nil {
		t.Fatal(err)
	}
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

// checkCharged: the store charged want, up to the refill a full bucket
// could not take between the start's peek and the first admission.
func checkCharged(t *testing.T, p *pattern, s summary, want float64) {
	t.Helper()
	waste := boundRefill * p.firstAdmittedWait.Seconds()
	if s.charged < want-1e-6*want || s.charged > want+waste+1e-6*want {
		t.Errorf("%s: Redis shows %.3f charged, want %.0f (+ up to %.1f refill a full bucket could not take before the first admission)",
			p.name, s.charged, want, waste)
	}
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
