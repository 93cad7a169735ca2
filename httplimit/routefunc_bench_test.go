package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit"
)

// BenchmarkRouteFunc: a request whose route a framework-typed function
// names (here exempt: no store call), so that what is measured is the
// adapter's path to the gate.
func BenchmarkRouteFunc(b *testing.B) {
	lim := testkit.NewUnitLimiter(b)
	h := httplimit.Middleware(testkit.NewUnitGate(b, lim), httplimit.WithRouteFunc(func(*http.Request) (gate.Route, bool) { return gate.Route{Exempt: true}, true }))(ok)
	req := withTenant(httptest.NewRequest("GET", "/x", nil), "bench")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}
