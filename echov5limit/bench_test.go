package echov5limit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echov5limit"
)

// BenchmarkOverhead: what the middleware adds beyond core's Gate.Decide
// (see conformance.BenchmarkOverhead).
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkOverhead(b, func(g *gate.Gate) (http.Handler, http.Handler) {
		service := func(limit ...echo.MiddlewareFunc) http.Handler {
			e := echo.New()
			e.Use(as(conformance.BenchTenant))
			e.Use(limit...)
			for _, p := range []string{"/v1/profile", "/healthz"} {
				e.GET(p, func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
			}
			return e
		}
		return service(), service(echov5limit.Middleware(g))
	})
}
