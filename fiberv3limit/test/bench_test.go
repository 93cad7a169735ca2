package fiberv3limit_test

import (
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// BenchmarkOverhead: what the handler adds beyond core's Gate.Decide (see
// conformance.BenchmarkOverhead). Both apps are served through Fiber's
// net/http bridge (adaptor.FiberApp), whose cost is in bare and limited
// alike and so drops out of limited − bare.
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkOverhead(b, func(lim *core.Limiter, routes core.Routes) (http.Handler, http.Handler) {
		service := func(limit ...any) http.Handler {
			app := fiber.New()
			app.Use(as(conformance.BenchTenant))
			chain := append(limit, fiber.Handler(ok))
			for _, p := range []string{"/v1/profile", "/healthz"} {
				app.Get(p, chain[0], chain[1:]...)
			}
			return adaptor.FiberApp(app)
		}
		return service(), service(fiberv3limit.New(lim, fiberv3limit.WithRoutes(routes)))
	})
}
