package httplimit_test

import (
	"net/http"
	"net/http/httptest"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

func withTenant(r *http.Request, id string) *http.Request {
	return r.WithContext(gate.ContextWithTenant(r.Context(), quota.Tenant{ID: id}))
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
