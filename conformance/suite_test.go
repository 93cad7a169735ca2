package conformance

import (
	"flag"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the reference target")

func TestMain(m *testing.M) {
	flag.Parse()
	updateGolden = *update
	if b := os.Getenv(envBackends); b != "" {
		onlyBackends = strings.Split(b, ",")
	}
	Main(m)
}

// fault is a way an adapter can get the standard wrong.
type fault string

const (
	correct            fault = ""
	dropsRetryAfter    fault = "drops-retry-after"
	tenantFromHeader   fault = "tenant-from-header"
	rawURL             fault = "raw-url"
	handlerOnDeny      fault = "handler-on-deny"
	storeFailureIs429  fault = "store-failure-is-429"
	headersOnlyOnAllow fault = "headers-only-on-allow"
	chargesUnmatched   fault = "charges-unmatched"
	releaseMissing     fault = "release-missing"
	releaseTwice       fault = "release-twice"
	costContextLost    fault = "cost-context-lost"
	catchAllUnmatched  fault = "catch-all-unmatched"
)

// reference is the thinnest possible adapter: net/http calling the Gate
// directly. It generates the golden transcripts; with a fault it is a
// deliberately wrong adapter the suite must reject.
func reference(f fault) Target {
	return HTTPTarget(func(t testing.TB, s Setup) (Instance, error) {
		g, err := gate.New(s.Limiter, s.GateOptions(HTTPRoutes(s.Routes, nil))...)
		if err != nil {
			return nil, err
		}
		var calls Counter
		handler := func(w http.ResponseWriter, r *http.Request) {
			calls.Inc()
			if err := ReportActualCost(r.Context(), r.Header.Get(ActualCostHeader)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
		mux := http.NewServeMux()
		for _, e := range HTTPEndpoints {
			mux.HandleFunc(e.Method+" "+e.Path, handler)
		}
		if s.CatchAll {
			mux.HandleFunc("/", handler) // every path no other pattern matches
		}
		limit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, pattern := mux.Handler(r)
			if _, template, ok := strings.Cut(pattern, " "); ok {
				pattern = template // without the method
			}
			if f == rawURL {
				pattern = r.URL.Path
			}
			ip, _, _ := net.SplitHostPort(r.RemoteAddr)
			// no pattern: the mux answers 404 or 405 itself
			unmatched := pattern == "" && f != chargesUnmatched
			if f == catchAllUnmatched && pattern == "/" {
				unmatched = true // the catch-all taken for the mux's 404
			}
			v := g.Decide(r.Context(), gate.Endpoint{Method: r.Method, Pattern: pattern, ClientIP: ip, Unmatched: unmatched})
			if v.Err != nil {
				s.OnError(v.Err)
			}
			if f != headersOnlyOnAllow || v.Proceed {
				for _, h := range v.Headers {
					if f == dropsRetryAfter && h.Name == "Retry-After" {
						continue
					}
					w.Header().Set(h.Name, h.Value)
				}
			}
			if v.Proceed || f == handlerOnDeny {
				switch f {
				case releaseMissing:
				case releaseTwice:
					// once as the handler starts (as if it were done), once
					// when it returns
					v.Done()
					defer v.Done()
				default:
					defer v.Done()
				}
				if ctx, ok := v.CostContext(r.Context()); ok && f != costContextLost {
					r = r.WithContext(ctx)
				}
				mux.ServeHTTP(w, r)
				return
			}
			status := v.Status
			if f == storeFailureIs429 && status == 503 {
				status = 429
			}
			w.Header().Set("Content-Type", v.ContentType)
			w.WriteHeader(status)
			_, _ = w.Write(v.Body)
		})
		auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tn, ok := Authenticate(r.Header.Get("Authorization")); ok {
				r = r.WithContext(gate.ContextWithTenant(r.Context(), tn))
			}
			if id := r.Header.Get("X-Tenant-Id"); id != "" && f == tenantFromHeader {
				r = r.WithContext(gate.ContextWithTenant(r.Context(), quota.Tenant{ID: id}))
			}
			limit.ServeHTTP(w, r)
		})
		return HandlerInstance(auth, &calls), nil
	})
}

// TestGolden runs the suite against the reference adapter; with -update it
// rewrites the golden transcripts.
func TestGolden(t *testing.T) {
	Run(t, reference(correct))
}

const envWrong = "CONFORMANCE_WRONG_TARGETS"

// TestWrongTargets runs the suite against deliberately wrong adapters. It
// runs only in the child process of TestSuiteCatchesDivergence, which
// expects it to fail.
func TestWrongTargets(t *testing.T) {
	if os.Getenv(envWrong) == "" {
		t.Skip("run by TestSuiteCatchesDivergence in a child process")
	}
	for _, f := range []fault{dropsRetryAfter, tenantFromHeader, rawURL, handlerOnDeny, storeFailureIs429, headersOnlyOnAllow, chargesUnmatched, releaseMissing, releaseTwice, costContextLost, catchAllUnmatched} {
		t.Run(string(f), func(t *testing.T) { Run(t, reference(f)) })
	}
}

// TestSuiteCatchesDivergence proves the suite can fail: each wrong adapter
// must fail the scenarios that pin the rule it breaks (run in a child
// process, so that their failures do not fail this test binary).
func TestSuiteCatchesDivergence(t *testing.T) {
	if os.Getenv(envWrong) != "" {
		t.Skip("child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWrongTargets$", "-test.v", "-test.count=1", "-test.parallel=8")
	// one standalone Redis shared with the child; the Cluster scenarios
	// are the same code and are covered by TestGolden
	cmd.Env = append(os.Environ(), envWrong+"=1", "REDIS_URL="+redistest.URL(t), envBackends+"=standalone,dead-standalone,paused")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed every wrong adapter:\n%s", out)
	}
	failed := map[string][]string{}
	for _, m := range regexp.MustCompile(`--- FAIL: TestWrongTargets/([^/\s]+)/([^/\s]+)/`).FindAllStringSubmatch(string(out), -1) {
		failed[m[1]] = append(failed[m[1]], m[2])
	}
	// the scenarios each fault must fail (at least)
	expect := map[fault][]string{
		dropsRetryAfter:    {"burst-then-deny", "refill", "retry-after-ceil"},
		tenantFromHeader:   {"forged-tenant-header"},
		rawURL:             {"route-template"},
		handlerOnDeny:      {"burst-then-deny", "cost-exceeds-capacity", "no-tenant", "replicas", "fail-closed"},
		storeFailureIs429:  {"fail-closed", "hung-redis-fail-closed"},
		headersOnlyOnAllow: {"burst-then-deny", "multi-bucket"},
		chargesUnmatched:   {"unmatched-route"},
		// no Done: nothing is settled; Done before the handler: settled
		// before the handler reported
		releaseMissing:    {"concurrency-limit", "settle-refund", "settle-debt"},
		releaseTwice:      {"concurrency-limit", "settle-refund", "settle-debt"},
		costContextLost:   {"settle-refund", "settle-debt"},
		catchAllUnmatched: {"catch-all"},
	}
	for f, scenarios := range expect {
		for _, s := range scenarios {
			if !slices.Contains(failed[string(f)], s) {
				t.Errorf("wrong adapter %q passed scenario %q", f, s)
			}
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}
