package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

func newLimiter(t testing.TB) *core.Limiter {
	t.Helper()
	res, err := core.NewResolver(core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		"default": {Capacity: 2, RefillPerSecond: 0.01},
		"export":  {Capacity: 10, RefillPerSecond: 0.01},
	}}}})
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
func tenant(id string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.SetRequest(c.Request().WithContext(core.ContextWithTenant(c.Request().Context(), core.Tenant{ID: id})))
			return next(c)
		}
	}
}

func get(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

func ok(c echo.Context) error { return c.NoContent(http.StatusOK) }
