package conformance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// BenchTenant is the tenant an overhead benchmark's handlers must charge:
// their auth middleware puts quota.Tenant{ID: BenchTenant} in the context.
const BenchTenant = "bench"

// BenchRoutes is the route table an overhead benchmark's adapter must use:
// GET /v1/profile is charged (a Redis round trip), GET /healthz is exempt
// (answered by core without Redis).
var BenchRoutes = gate.Routes{"/healthz": {Exempt: true}}

// BenchmarkOverhead measures what an HTTP adapter adds to a request beyond
// core's Gate.Decide, against a real Redis:
//
//	overhead ≈ limited − bare − decide
//
// build returns two handlers serving GET /v1/profile and GET /healthz behind
// an auth middleware that sets BenchTenant: bare without the limiter, limited
// with the adapter over gate (a gate.Gate with BenchRoutes as its route
// table, the one the decide cases ask). The "redis" cases include the
// round trip; the "exempt" cases isolate the adapter's own cost from the
// network's noise.
func BenchmarkOverhead(b *testing.B, build func(g *gate.Gate) (bare, limited http.Handler)) {
	BenchmarkServerOverhead(b, func(g *gate.Gate) (BenchServer, BenchServer) {
		bare, limited := build(g)
		return handlerServer(bare), handlerServer(limited)
	})
}

// A BenchServer serves GET requests to one service in process, for
// BenchmarkServerOverhead: called once per path, it returns a function that
// serves one request to that path and returns the response's status (so it
// can prepare the request once).
type BenchServer func(path string) (serve func() (status int))

func handlerServer(h http.Handler) BenchServer {
	return func(path string) func() int {
		req := httptest.NewRequest("GET", path, nil)
		return func() int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code
		}
	}
}

// BenchmarkServerOverhead is BenchmarkOverhead for services that are not an
// http.Handler (Fiber's fasthttp handler, served without a network).
func BenchmarkServerOverhead(b *testing.B, build func(g *gate.Gate) (bare, limited BenchServer)) {
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{quota.
		DefaultClass: {Capacity: quota.MaxCapacity, RefillPerSecond: quota.MaxRefillPerSecond},
	}}}})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := core.New(redistest.Client(b), res, core.WithPrefix(redistest.Prefix(b)), core.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gate.New(lim, gate.WithRoutes(BenchRoutes))
	if err != nil {
		b.Fatal(err)
	}
	bare, limited := build(g)
	for name, path := range map[string]string{"redis": "/v1/profile", "exempt": "/healthz"} {
		ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: BenchTenant})
		ep := gate.Endpoint{Method: "GET", Pattern: path, ClientIP: "192.0.2.1"}
		b.Run(name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := g.Decide(ctx, ep); !v.Proceed {
					b.Fatal(v.Status)
				}
			}
		})
		for _, s := range []struct {
			name string
			s    BenchServer
		}{{"bare", bare}, {"limited", limited}} {
			b.Run(name+"/"+s.name, func(b *testing.B) {
				serve := s.s(path)
				b.ReportAllocs()
				for b.Loop() {
					if status := serve(); status != http.StatusOK {
						b.Fatal(status)
					}
				}
			})
		}
	}
}
