package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

func newLimiter(t testing.TB, tiers ...core.Tiers) *core.Limiter {
	t.Helper()
	ts := core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		"default": {Capacity: 2, RefillPerSecond: 0.01},
		"export":  {Capacity: 10, RefillPerSecond: 0.01},
	}}}}
	if len(tiers) > 0 {
		ts = tiers[0]
	}
	res, err := core.NewResolver(ts)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(redistest.Client(t), res, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// tenant is a test auth middleware that stores tenant id.
func tenant(id string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request = c.Request.WithContext(core.ContextWithTenant(c.Request.Context(), core.Tenant{ID: id}))
	}
}

func get(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}
