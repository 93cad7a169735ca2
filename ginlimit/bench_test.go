package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/ginlimit"
)

// BenchmarkOverhead: what the middleware adds beyond core's Gate.Decide
// (see conformance.BenchmarkOverhead).
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkOverhead(b, func(g *gate.Gate) (http.Handler, http.Handler) {
		engine := func(mws ...gin.HandlerFunc) http.Handler {
			r := gin.New()
			r.Use(tenant(conformance.BenchTenant))
			r.Use(mws...)
			r.GET("/v1/profile", ok)
			r.GET("/healthz", ok)
			return r
		}
		return engine(), engine(ginlimit.Middleware(g))
	})
}
