package echolimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/echolimit"
)

// BenchmarkOverhead measures what the middleware adds to a request beyond
// core's Gate.Decide, against a real Redis:
//
//	overhead ≈ limited − bare − decide
//
// The "redis" cases include the round trip; the "exempt" cases use an
// exempt route, which core answers without Redis, so they isolate the
// adapter's own cost from the network's noise.
func BenchmarkOverhead(b *testing.B) {
	res, err := core.NewResolver(core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		"default": {Capacity: core.MaxCapacity, RefillPerSecond: core.MaxRefillPerSecond},
	}}}})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := core.New(redistest.Client(b), res, core.WithPrefix(redistest.Prefix(b)), core.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	routes := core.Routes{"/healthz": {Exempt: true}}
	gate, err := core.NewGate(lim, core.WithRoutes(routes))
	if err != nil {
		b.Fatal(err)
	}
	engine := func(mws ...echo.MiddlewareFunc) *echo.Echo {
		e := echo.New()
		e.Use(tenant("bench"))
		e.Use(mws...)
		e.GET("/v1/profile", ok)
		e.GET("/healthz", ok)
		return e
	}
	bare, limited := engine(), engine(echolimit.Middleware(lim, echolimit.WithRoutes(routes)))
	for name, path := range map[string]string{"redis": "/v1/profile", "exempt": "/healthz"} {
		req := httptest.NewRequest("GET", path, nil)
		ctx := core.ContextWithTenant(req.Context(), core.Tenant{ID: "bench"})
		ep := core.Endpoint{Method: "GET", Pattern: path, ClientIP: "192.0.2.1"}
		b.Run(name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := gate.Decide(ctx, ep); !v.Proceed {
					b.Fatal(v.Status)
				}
			}
		})
		b.Run(name+"/bare", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bare.ServeHTTP(httptest.NewRecorder(), req)
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
