// Command echo is the example service on Echo v4 with tollgate's echolimit
// middleware. The nethttp, gin, echov5, fiber, fiberv3 and grpc examples
// serve the same API, so they can be compared.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./echo
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8093/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echolimit"
	"github.com/tollgate-go/tollgate/examples/internal/app"
)

func main() {
	app.MainHTTP("echo", NewHandler)
}

// NewHandler returns the service: /healthz and /metrics open, the /v1
// routes behind authentication and then the limiter.
func NewHandler(a *app.App) (http.Handler, error) {
	opts := []echolimit.Option{
		echolimit.WithErrorHandler(func(c echo.Context, err error) {
			a.LimiterError(c.Path(), err)
		}),
	}
	auth, limit := authenticate(a.Auth), echolimit.Middleware(a.Gate, opts...)

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(middleware.Recover())
	e.GET(app.PathHealth, func(c echo.Context) error { return c.JSON(http.StatusOK, app.Health{Status: "ok"}) })
	e.GET(app.PathMetrics, echo.WrapHandler(a.Metrics))
	e.GET(app.PathProfile, func(c echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.GetProfile(t))
	}, auth, limit)
	e.GET(app.PathReports, func(c echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.ListReports(c.Request().Context(), t))
	}, auth, limit)
	e.POST(app.PathExport, func(c echo.Context) error {
		t, _ := gate.TenantFromContext(c.Request().Context())
		return c.JSON(http.StatusOK, a.ExportReport(t))
	}, auth, limit)
	e.POST(app.PathComplete, func(c echo.Context) error {
		return c.Blob(a.Complete(c.Request().Context(), c.Request().Body))
	}, auth, limit)
	return e, nil
}

// authenticate verifies the bearer token and stores the tenant with
// gate.ContextWithTenant, or answers 401.
func authenticate(v *app.Verifier) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
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
