package fiberlimit_test

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/conformance"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/fiberlimit"
	"github.com/valyala/fasthttp"
)

// BenchmarkOverhead: what the handler adds beyond core's Gate.Decide (see
// conformance.BenchmarkServerOverhead). Requests go straight to the app's
// fasthttp handler, with no network.
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkServerOverhead(b, func(gate *tggate.Gate) (conformance.BenchServer, conformance.BenchServer) {
		service := func(mws ...fiber.Handler) conformance.BenchServer {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Use(tenant(conformance.BenchTenant))
			for _, p := range []string{"/v1/profile", "/healthz"} {
				app.Get(p, append(mws, ok)...)
			}
			h := app.Handler()
			return func(path string) func() int {
				var req fasthttp.Request
				req.SetRequestURI(path)
				var fc fasthttp.RequestCtx
				peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
				return func() int {
					fc.Init(&req, peer, nil)
					h(&fc)
					return fc.Response.StatusCode()
				}
			}
		}
		return service(), service(fiberlimit.New(gate))
	})
}
