package echov5limit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/echov5limit"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant in the request context.
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if t, ok := conformance.Authenticate(c.Request().Header.Get(echo.HeaderAuthorization)); ok {
			c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(c.Request().Context(), t)))
		}
		return next(c)
	}
}

// mount is where the service registers the middleware.
type mount int

const (
	global   mount = iota // e.Use
	group                 // on the /v1 group (/healthz outside it)
	perRoute              // on each route
)

// target builds the suite's service on Echo v5. mistake, when not nil,
// changes the service into a deliberately wrong one.
func target(m mount, mistake func(*echo.Echo, *[]echov5limit.Option)) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		e := echo.New() // no IPExtractor: c.RealIP() is the peer's address
		opts := []echov5limit.Option{echov5limit.WithErrorHandler(func(_ *echo.Context, err error) { s.OnError(err) })}
		if mistake != nil {
			mistake(e, &opts)
		}
		g, err := gate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath))...)
		if err != nil {
			return nil, err
		}
		mw := echov5limit.Middleware(g, opts...)
		var calls conformance.Counter
		handler := func(c *echo.Context) error {
			calls.Inc()
			if err := conformance.ReportActualCost(c.Request().Context(), c.Request().Header.Get(conformance.ActualCostHeader)); err != nil {
				return c.String(http.StatusInternalServerError, err.Error())
			}
			return c.NoContent(http.StatusOK)
		}
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
	t.Run("global", func(t *testing.T) { conformance.Run(t, target(global, nil)) })
	t.Run("group", func(t *testing.T) { conformance.Run(t, target(group, nil)) })
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(perRoute, nil)) })
}

// The suite rejects Echo v5 services that get the standard wrong, which
// proves that the target above can fail it.
func TestConformanceRejectsWrongVariants(t *testing.T) {
	// Echo's own 429 (echo.ErrTooManyRequests rendered by the default
	// HTTPErrorHandler): JSON {"message":...}, not core's problem+json.
	t.Run("deny-with-echo-error", func(t *testing.T) {
		conformance.RunFailing(t, target(global, func(_ *echo.Echo, opts *[]echov5limit.Option) {
			*opts = append(*opts, echov5limit.WithDenyHandler(func(*echo.Context, gate.Verdict) error { return echo.ErrTooManyRequests }))
		}), "burst-then-deny", "cost-exceeds-capacity")
	})
	// Echo v4's behaviour, kept in v5 as LegacyIPExtractor: X-Forwarded-For
	// picks the anonymous caller's key.
	t.Run("legacy-ip-extractor", func(t *testing.T) {
		conformance.RunFailing(t, target(global, func(e *echo.Echo, _ *[]echov5limit.Option) {
			e.IPExtractor = echo.LegacyIPExtractor()
		}), "anonymous")
	})
}
