package ginlimit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/ginlimit"
)

func init() { gin.SetMode(gin.TestMode) }

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant in the request context.
func auth(c *gin.Context) {
	if t, ok := conformance.Authenticate(c.GetHeader("Authorization")); ok {
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), t))
	}
	c.Next()
}

type mount int

const (
	global mount = iota
	group
	perRoute
)

// target builds the suite's service on Gin, the middleware where m says.
func target(m mount) conformance.Target {
	return targetReportingOn(m, func(c *gin.Context) context.Context { return c.Request.Context() })
}

// targetReportingOn is target whose handlers report their actual cost on
// the context ctx returns.
func targetReportingOn(m mount, ctx func(*gin.Context) context.Context) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		g, err := gate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath))...)
		if err != nil {
			return nil, err
		}
		mw := ginlimit.Middleware(g, ginlimit.WithErrorHandler(func(_ *gin.Context, err error) { s.OnError(err) }))
		var calls conformance.Counter
		handler := func(c *gin.Context) {
			calls.Inc()
			if err := conformance.ReportActualCost(ctx(c), c.GetHeader(conformance.ActualCostHeader)); err != nil {
				c.String(http.StatusInternalServerError, err.Error())
				return
			}
			c.Status(http.StatusOK)
		}
		r := gin.New()
		if err := r.SetTrustedProxies(nil); err != nil { // c.ClientIP() is the peer's address
			return nil, err
		}
		r.Use(auth)
		var routes gin.IRoutes = r
		switch m {
		case global:
			r.Use(mw)
		case group:
			routes = r.Group("/", mw)
		}
		for _, e := range conformance.HTTPEndpoints {
			if m == perRoute {
				routes.Handle(e.Method, e.ColonPath(), mw, handler)
			} else {
				routes.Handle(e.Method, e.ColonPath(), handler)
			}
		}
		switch {
		case s.CatchAll && m == perRoute:
			r.NoRoute(mw, handler)
		case s.CatchAll:
			r.NoRoute(handler) // after the global middleware, the limiter among them
		}
		return conformance.HandlerInstance(r, &calls), nil
	})
}

func TestConformance(t *testing.T) {
	t.Run("global", func(t *testing.T) { conformance.Run(t, target(global)) })
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(perRoute)) })
}

// The suite rejects a Gin service that gets settling wrong, which proves
// that the target above can fail the settle scenarios.
func TestConformanceRejectsWrongVariants(t *testing.T) {
	// *gin.Context is a context.Context, but with Gin's default
	// ContextWithFallback false its Value does not reach the request's
	// context, where the reservation is: the report is lost (ReportCost
	// errs) and the estimate stands.
	t.Run("report-on-gin-context", func(t *testing.T) {
		conformance.RunFailing(t, targetReportingOn(global, func(c *gin.Context) context.Context { return c }), "settle-refund", "settle-debt")
	})
}
