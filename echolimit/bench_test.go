package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echolimit"
)

// BenchmarkOverhead: what the middleware adds beyond core's Gate.Decide
// (see conformance.BenchmarkOverhead).
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkOverhead(b, func(g *gate.Gate) (http.Handler, http.Handler) {
		engine := func(mws ...echo.MiddlewareFunc) http.Handler {
			e := echo.New()
			e.Use(tenant(conformance.BenchTenant))
			e.Use(mws...)
			e.GET("/v1/profile", ok)
			e.GET("/healthz", ok)
			return e
		}
		return engine(), engine(echolimit.Middleware(g))
	})
}
