package conformance_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
)

// An in-house adapter runs the suite from its own tests. Here the
// "framework" is plain net/http and the adapter is the thinnest possible:
// it asks core's Gate and renders the Verdict.
func ExampleRun() {
	target := conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		// 2. the adapter under test, configured from the Setup
		g, err := gate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, nil))...)
		if err != nil {
			return nil, err
		}
		// 3. the service's handlers, counting their calls and reporting
		// the actual cost a settle scenario asks for
		var calls conformance.Counter
		handler := func(w http.ResponseWriter, r *http.Request) {
			calls.Inc()
			if err := conformance.ReportActualCost(r.Context(), r.Header.Get(conformance.ActualCostHeader)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}
		mux := http.NewServeMux()
		for _, e := range conformance.HTTPEndpoints {
			mux.HandleFunc(e.Method+" "+e.Path, handler)
		}
		if s.CatchAll {
			mux.HandleFunc("/", handler) // the service's catch-all: charged
		}
		limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, pattern := mux.Handler(r) // "" when the mux answers 404 or 405 itself
			_, template, _ := strings.Cut(pattern, " ")
			if template == "" {
				template = pattern
			}
			ip, _ := netip.ParseAddrPort(r.RemoteAddr)
			v := g.Decide(r.Context(), gate.Endpoint{Method: r.Method, Pattern: template, ClientIP: ip.Addr().String(), Unmatched: pattern == ""})
			if v.Err != nil {
				s.OnError(v.Err)
			}
			for _, h := range v.Headers {
				w.Header().Set(h.Name, h.Value)
			}
			if !v.Proceed {
				w.Header().Set("Content-Type", v.ContentType)
				w.WriteHeader(v.Status)
				_, _ = w.Write(v.Body)
				return
			}
			defer v.Done() // frees a concurrency slot, settles a reported cost
			if ctx, ok := v.CostContext(r.Context()); ok {
				r = r.WithContext(ctx) // the handler reports its cost on it
			}
			mux.ServeHTTP(w, r)
		})
		// 1. the test authentication layer, in front
		auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tn, ok := conformance.Authenticate(r.Header.Get("Authorization")); ok {
				r = r.WithContext(gate.ContextWithTenant(r.Context(), tn))
			}
			limited.ServeHTTP(w, r)
		})
		return conformance.HandlerInstance(auth, &calls), nil
	})

	// In a _test.go file of the adapter's package:
	_ = func(t *testing.T) { conformance.Run(t, target) }
}

// The identity the suite sends, and what the test authentication layer
// makes of it.
func ExampleAuthenticate() {
	r := conformance.Request{Endpoint: conformance.EndpointProfile, Tenant: "acme:eu", Tier: "pro"}
	fmt.Println(r.Authorization())
	t, ok := conformance.Authenticate(r.Authorization())
	fmt.Printf("%q %q %v\n", t.ID, t.Tier, ok)
	_, ok = conformance.Authenticate("Bearer something-else")
	fmt.Println(ok)
	// Output:
	// Bearer test:acme%3Aeu:pro
	// "acme:eu" "pro" true
	// false
}

// The route table a Gin, Echo or Fiber target configures.
func ExampleHTTPRoutes() {
	rs := conformance.HTTPRoutes(map[string]gate.Route{
		conformance.EndpointExport: {Class: "export", Cost: 4},
		conformance.EndpointItem:   {Class: "items", Cost: 1},
	}, conformance.HTTPEndpoint.ColonPath)
	keys := make([]string, 0, len(rs))
	for k := range rs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k, "->", rs[k].Class, rs[k].Cost)
	}
	// Output:
	// GET /v1/items/:id -> items 1
	// POST /v1/reports/export -> export 4
}
