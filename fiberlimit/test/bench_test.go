package fiberlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/fiberlimit"
	"github.com/valyala/fasthttp"
)

// BenchmarkOverhead measures what the handler adds to a request beyond
// core's Gate.Decide, against a real Redis:
//
//	overhead ≈ limited − bare − decide
//
// The "redis" cases include the round trip; the "exempt" cases use an
// exempt route, which core answers without Redis, so they isolate the
// adapter's own cost from the network's noise. Requests go straight to the
// app's fasthttp handler, with no network.
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
	app := func(mws ...fiber.Handler) fasthttp.RequestHandler {
		a := fiber.New(fiber.Config{DisableStartupMessage: true})
		a.Use(tenant("bench"))
		for _, p := range []string{"/v1/profile", "/healthz"} {
			a.Get(p, append(mws, ok)...)
		}
		return a.Handler()
	}
	bare, limited := app(), app(fiberlimit.New(lim, fiberlimit.WithRoutes(routes)))
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
	for name, path := range map[string]string{"redis": "/v1/profile", "exempt": "/healthz"} {
		var req fasthttp.Request
		req.SetRequestURI(path)
		ctx := core.ContextWithTenant(b.Context(), core.Tenant{ID: "bench"})
		ep := core.Endpoint{Method: "GET", Pattern: path, ClientIP: "192.0.2.1"}
		b.Run(name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := gate.Decide(ctx, ep); !v.Proceed {
					b.Fatal(v.Status)
				}
			}
		})
		serve := func(b *testing.B, h fasthttp.RequestHandler) {
			b.ReportAllocs()
			var fc fasthttp.RequestCtx
			for b.Loop() {
				fc.Init(&req, addr, nil)
				h(&fc)
				if fc.Response.StatusCode() != 200 {
					b.Fatal(fc.Response.StatusCode())
				}
			}
		}
		b.Run(name+"/bare", func(b *testing.B) { serve(b, bare) })
		b.Run(name+"/limited", func(b *testing.B) { serve(b, limited) })
	}
}
