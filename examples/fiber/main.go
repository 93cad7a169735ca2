// Command fiber is the example service on Fiber v2 with tollgate's
// fiberlimit handler. The nethttp, gin, echo, echov5, fiberv3 and grpc
// examples serve the same API, so they can be compared.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./fiber
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8094/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"bytes"
	"context"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/fiberlimit"
)

func main() { app.Main("fiber", Run) }

// Run builds the service and serves it on ln until ctx is done, then
// shuts down gracefully.
func Run(ctx context.Context, a *app.App, ln net.Listener) error {
	f, err := NewApp(a)
	if err != nil {
		return err
	}
	return app.Serve(ctx, func() error { return f.Listener(ln) },
		func() error { return f.ShutdownWithTimeout(app.ShutdownTimeout) })
}

// NewApp returns the service: /healthz and /metrics open, the /v1 routes
// behind authentication and then the limiter (on each route, so that the
// limiter sees the route's template).
func NewApp(a *app.App) (*fiber.App, error) {
	opts := []fiberlimit.Option{
		fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) {
			a.LimiterError(c.Route().Path, err)
		}),
	}
	auth, limit := authenticate(a.Auth), fiberlimit.New(a.Gate, opts...)

	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	f.Use(recover.New())
	f.Get(app.PathHealth, func(c *fiber.Ctx) error { return c.JSON(app.Health{Status: "ok"}) })
	f.Get(app.PathMetrics, adaptor.HTTPHandler(a.Metrics))
	f.Get(app.PathProfile, auth, limit, func(c *fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.UserContext())
		return c.JSON(a.GetProfile(t))
	})
	f.Get(app.PathReports, auth, limit, func(c *fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.UserContext())
		return c.JSON(a.ListReports(c.UserContext(), t))
	})
	f.Post(app.PathExport, auth, limit, func(c *fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.UserContext())
		return c.JSON(a.ExportReport(t))
	})
	f.Post(app.PathComplete, auth, limit, func(c *fiber.Ctx) error {
		status, contentType, body := a.Complete(c.UserContext(), bytes.NewReader(c.Body()))
		c.Set(fiber.HeaderContentType, contentType)
		return c.Status(status).Send(body)
	})
	return f, nil
}

// authenticate verifies the bearer token and stores the tenant with
// fiberlimit.SetTenant (gate.ContextWithTenant in the user context), or
// answers 401.
func authenticate(v *app.Verifier) fiber.Handler {
	return func(c *fiber.Ctx) error {
		t, err := v.Authenticate(c.Get(fiber.HeaderAuthorization))
		if err != nil {
			status, contentType, body := app.Unauthorized(err)
			c.Set(fiber.HeaderWWWAuthenticate, app.WWWAuthenticate)
			c.Set(fiber.HeaderContentType, contentType)
			return c.Status(status).Send(body)
		}
		fiberlimit.SetTenant(c, t)
		return c.Next()
	}
}
