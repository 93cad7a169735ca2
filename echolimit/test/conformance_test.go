package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/echolimit"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant in the request context.
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if t, ok := conformance.Authenticate(c.Request().Header.Get("Authorization")); ok {
			c.SetRequest(c.Request().WithContext(core.ContextWithTenant(c.Request().Context(), t)))
		}
		return next(c)
	}
}

func options(s conformance.Setup) []echolimit.Option {
	opts := []echolimit.Option{
		echolimit.WithRoutes(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath)),
		echolimit.WithHeaderStyle(s.HeaderStyle),
		echolimit.WithGateOptions(core.WithClock(s.Clock)),
		echolimit.WithErrorHandler(func(_ echo.Context, err error) { s.OnError(err) }),
	}
	if s.Anonymous {
		opts = append(opts, echolimit.WithAnonymous(""))
	}
	return opts
}

func target(perRoute bool) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		if err := echolimit.Validate(s.Limiter, options(s)...); err != nil {
			return nil, err
		}
		mw := echolimit.Middleware(s.Limiter, options(s)...)
		var calls conformance.Counter
		handler := func(c echo.Context) error { calls.Inc(); return c.NoContent(http.StatusOK) }
		e := echo.New()
		e.IPExtractor = echo.ExtractIPDirect() // c.RealIP() is the peer's address
		e.Use(auth)
		if !perRoute {
			e.Use(mw)
		}
		for _, ep := range conformance.HTTPEndpoints {
			if perRoute {
				e.Add(ep.Method, ep.ColonPath(), handler, mw)
			} else {
				e.Add(ep.Method, ep.ColonPath(), handler)
			}
		}
		return conformance.HandlerInstance(e, &calls), nil
	})
}

func TestConformance(t *testing.T) {
	t.Run("global", func(t *testing.T) { conformance.Run(t, target(false)) })
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(true)) })
}
