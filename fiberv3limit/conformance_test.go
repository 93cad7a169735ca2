package fiberv3limit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/tollgate-go/tollgate/conformance"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant for the limiter.
func auth(c fiber.Ctx) error {
	if t, ok := conformance.Authenticate(c.Get(fiber.HeaderAuthorization)); ok {
		fiberv3limit.SetTenant(c, t)
	}
	return c.Next()
}

// suiteGate is the suite's configuration as the gate the handler takes.
func suiteGate(s conformance.Setup) (*tggate.Gate, error) {
	return tggate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath))...)
}

// mount is where the service registers the handler.
type mount int

const (
	perRoute mount = iota // on each route of the app
	inGroup               // on each route of a /v1 group (/healthz outside it)
	use                   // app.Use: wrong, c.Route().Path is the mount prefix
)

// target builds the suite's service on Fiber v3, served in process through
// Fiber's own net/http bridge (adaptor.FiberApp), which hands the app the
// suite's client address as the connection's remote address. more are
// options appended to the suite's (a wrong variant's mistake).
func target(m mount, more ...fiberv3limit.Option) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		g, err := suiteGate(s)
		if err != nil {
			return nil, err
		}
		opts := append([]fiberv3limit.Option{fiberv3limit.WithErrorHandler(func(_ fiber.Ctx, err error) { s.OnError(err) })}, more...)
		limit := fiberv3limit.New(g, opts...)
		var calls conformance.Counter
		handler := func(c fiber.Ctx) error {
			calls.Inc()
			if err := conformance.ReportActualCost(c.Context(), c.Get(conformance.ActualCostHeader)); err != nil {
				return c.Status(http.StatusInternalServerError).SendString(err.Error())
			}
			return c.SendStatus(http.StatusOK)
		}
		app := fiber.New()
		app.Use(auth)
		if m == use {
			app.Use(limit)
		}
		v1 := app.Group("/v1")
		for _, ep := range conformance.HTTPEndpoints {
			sub, inV1 := strings.CutPrefix(ep.ColonPath(), "/v1")
			switch {
			case m == inGroup && inV1:
				v1.Add([]string{ep.Method}, sub, limit, handler)
			case m == use:
				app.Add([]string{ep.Method}, ep.ColonPath(), handler)
			default:
				app.Add([]string{ep.Method}, ep.ColonPath(), limit, handler)
			}
		}
		switch {
		case s.CatchAll && m == use:
			app.Use(handler) // after the routes: what no route matched
		case s.CatchAll:
			app.Use(limit, handler)
		}
		return conformance.HandlerInstance(adaptor.FiberApp(app), &calls), nil
	})
}

func TestConformance(t *testing.T) {
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(perRoute)) })
	t.Run("group", func(t *testing.T) { conformance.Run(t, target(inGroup)) })
}

// The suite rejects Fiber v3 services that get the standard wrong, which
// proves that the target above can fail it.
func TestConformanceRejectsWrongVariants(t *testing.T) {
	// Under app.Use, Fiber v3 still reports the mount prefix as the route:
	// the route table never matches, every route is the default route and
	// the exempt one is limited.
	t.Run("app-use", func(t *testing.T) {
		conformance.RunFailing(t, target(use), "route-template", "cost-classes")
	})
	// Fiber's own 429 (fiber.ErrTooManyRequests rendered by the default
	// ErrorHandler): text/plain, not core's problem+json.
	t.Run("deny-with-fiber-error", func(t *testing.T) {
		conformance.RunFailing(t, target(perRoute, fiberv3limit.WithDenyHandler(func(fiber.Ctx, tggate.Verdict) error {
			return fiber.ErrTooManyRequests
		})), "burst-then-deny", "cost-exceeds-capacity")
	})
}
