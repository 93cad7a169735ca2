package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/core"
)

func withTenant(r *http.Request, id string) *http.Request {
	return r.WithContext(core.ContextWithTenant(r.Context(), core.Tenant{ID: id}))
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// newGate builds the gate the middleware under test takes.
func newGate(t testing.TB, lim *core.Limiter, opts ...core.GateOption) *core.Gate {
	t.Helper()
	g, err := core.NewGate(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
