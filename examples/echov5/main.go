// Command echov5 is the example service on Echo v5 with tollgate's
// echov5limit middleware. The nethttp, gin, echo, fiber, fiberv3 and grpc
// examples serve the same API, so they can be compared.
//
//	cd examples && go run ./echov5
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8097/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echov5limit"
	"github.com/tollgate-go/tollgate/examples/internal/app"
)

func main() {
	app.MainHTTP("echov5", NewHandler)
}

// NewHandler returns the service: /healthz and /metrics open, the /v1
// group behind authentication and then the limiter.
func NewHandler(a *app.App) (http.Handler, error) {
	opts := []echov5limit.Option{
		echov5limit.WithErrorHandler(func(c *echo.Context, err error) {
			a.LimiterError(c.Path(), err)
		}),
	}

	e := echo.New() // Echo v5: c.RealIP() is the peer address unless an IPExtractor is set
	e.Logger = a.Log
	e.Use(middleware.Recover())
	e.GET(app.PathHealth, func(c *echo.Context) error { return c.JSON(http.StatusOK, app.Health{Status: "ok"}) })
	e.GET(app.PathMetrics, echo.WrapHandler(a.Metrics))
	v1 := e.Group("/v1", authenticate(a.Auth), echov5limit.Middleware(a.Gate, opts...))
	v1.GET(strings.TrimPrefix(app.PathProfile, "/v1"), func(c *echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.GetProfile(t))
	})
	v1.GET(strings.TrimPrefix(app.PathReports, "/v1"), func(c *echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.ListReports(c.Request().Context(), t))
	})
	v1.POST(strings.TrimPrefix(app.PathExport, "/v1"), func(c *echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.ExportReport(t))
	})
	v1.POST(strings.TrimPrefix(app.PathComplete, "/v1"), func(c *echo.Context) error {
		return c.Blob(a.Complete(c.Request().Context(), c.Request().Body))
	})
	return e, nil
}

// authenticate verifies the bearer token and stores the tenant with
// gate.ContextWithTenant, or answers 401.
func authenticate(v *app.Verifier) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			t, err := v.Authenticate(c.Request().Header.Get(echo.HeaderAuthorization))
			if err != nil {
				status, contentType, body := app.Unauthorized(err)
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, app.WWWAuthenticate)
				return c.Blob(status, contentType, body)
			}
			c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(c.Request().Context(), t)))
			return next(c)
		}
	}
}
