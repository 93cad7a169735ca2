package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit"
)

// BenchmarkOverhead measures what the middleware adds to a request beyond
// core's Gate.Decide, against a real Redis:
//
//	overhead ≈ limited − bare − decide
//
// The "redis" cases include the round trip; the "exempt" cases use an
// exempt route, which core answers without Redis, so they isolate the
// adapter's own cost (allocations included) from the network's noise.
func BenchmarkOverhead(b *testing.B) {
	res, err := core.NewResolver(core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		"default": {Capacity: core.MaxCapacity, RefillPerSecond: core.MaxRefillPerSecond},
	}}}})
	if err != nil {
		b.Fatal(err)
	}
	lim := newLimiter(b)
	lim, err = core.New(redisClient(b), res, core.WithPrefix(lim.Keys().Prefix()), core.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	routes := core.Routes{"/healthz": {Exempt: true}}
	gate, err := core.NewGate(lim, core.WithRoutes(routes))
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/profile", ok)
	mux.Handle("GET /healthz", ok)
	limited := httplimit.Middleware(lim, httplimit.WithRoutes(routes))(mux)
	for _, path := range []string{"/v1/profile", "/healthz"} {
		name := map[string]string{"/v1/profile": "redis", "/healthz": "exempt"}[path]
		req := withTenant(httptest.NewRequest("GET", path, nil), "bench")
		ep := core.Endpoint{Method: "GET", Pattern: path, ClientIP: "192.0.2.1"}
		b.Run(name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := gate.Decide(req.Context(), ep); !v.Proceed {
					b.Fatal(v.Status)
				}
			}
		})
		b.Run(name+"/bare", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mux.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
		b.Run(name+"/limited", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				limited.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
