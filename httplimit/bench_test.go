package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit"
)

// BenchmarkOverhead: what the middleware adds beyond core's Gate.Decide
// (see conformance.BenchmarkOverhead).
func BenchmarkOverhead(b *testing.B) {
	conformance.BenchmarkOverhead(b, func(g *gate.Gate) (http.Handler, http.Handler) {
		mux := http.NewServeMux()
		mux.Handle("GET /v1/profile", ok)
		mux.Handle("GET /healthz", ok)
		auth := func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, withTenant(r, conformance.BenchTenant))
			})
		}
		return auth(mux), auth(httplimit.Middleware(g)(mux))
	})
}
