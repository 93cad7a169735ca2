package echolimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echolimit"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant in the request context.
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if t, ok := conformance.Authenticate(c.Request().Header.Get("Authorization")); ok {
			c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(c.Request().Context(), t)))
		}
		return next(c)
	}
}

// mount is where the service registers the middleware.
type mount int

const (
	global   mount = iota // e.Use
	group                 // on the /v1 group (/healthz outside it): Echo adds RouteNotFound routes for it
	perRoute              // on each route
)

func target(m mount) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		g, err := gate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath))...)
		if err != nil {
			return nil, err
		}
		mw := echolimit.Middleware(g, echolimit.WithErrorHandler(func(_ echo.Context, err error) { s.OnError(err) }))
		var calls conformance.Counter
		handler := func(c echo.Context) error {
			calls.Inc()
			if err := conformance.ReportActualCost(c.Request().Context(), c.Request().Header.Get(conformance.ActualCostHeader)); err != nil {
				return c.String(http.StatusInternalServerError, err.Error())
			}
			return c.NoContent(http.StatusOK)
		}
		e := echo.New()
		e.IPExtractor = echo.ExtractIPDirect() // c.RealIP() is the peer's address
		e.Use(auth)
		if m == global {
			e.Use(mw)
		}
		v1 := e.Group("/v1")
		if m == group {
			v1.Use(mw)
		}
		for _, ep := range conformance.HTTPEndpoints {
			sub, inV1 := strings.CutPrefix(ep.ColonPath(), "/v1")
			switch {
			case m == group && inV1:
				v1.Add(ep.Method, sub, handler)
			case m == perRoute:
				e.Add(ep.Method, ep.ColonPath(), handler, mw)
			default:
				e.Add(ep.Method, ep.ColonPath(), handler)
			}
		}
		if s.CatchAll {
			switch m {
			case group:
				v1.RouteNotFound("/*", handler) // replaces the one the group's Use added
			case perRoute:
				e.RouteNotFound("/*", handler, mw)
			default:
				e.RouteNotFound("/*", handler)
			}
		}
		return conformance.HandlerInstance(e, &calls), nil
	})
}

func TestConformance(t *testing.T) {
	t.Run("global", func(t *testing.T) { conformance.Run(t, target(global)) })
	t.Run("group", func(t *testing.T) { conformance.Run(t, target(group)) })
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(perRoute)) })
}
