package ginlimit_test

import (
	"net/http"
	"net/http/httptest"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

// tenant is a test auth middleware that stores tenant id.
func tenant(id string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), quota.Tenant{ID: id}))
	}
}

func get(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}
