// Command fiberv3 is the example service on Fiber v3 with tollgate's
// fiberv3limit handler. The nethttp, gin, echo, echov5, fiber and grpc
// examples serve the same API, so they can be compared.
//
//	cd examples && go run ./fiberv3
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8098/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"bytes"
	"context"
	"net"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

func main() { app.Main("fiberv3", Run) }

// Run builds the service and serves it on ln until ctx is done, then
// shuts down gracefully.
func Run(ctx context.Context, a *app.App, ln net.Listener) error {
	f, err := NewApp(a)
	if err != nil {
		return err
	}
	return app.Serve(ctx, func() error { return f.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) },
		func() error { return f.ShutdownWithTimeout(app.ShutdownTimeout) })
}

// NewApp returns the service: /healthz and /metrics open, the /v1 routes
// behind authentication and then the limiter, on each route (so that the
// limiter sees the route's template: under app.Use or a group handler,
// Fiber v3 still reports the mount prefix).
func NewApp(a *app.App) (*fiber.App, error) {
	opts := []fiberv3limit.Option{
		fiberv3limit.WithErrorHandler(func(c fiber.Ctx, err error) {
			a.LimiterError(c.Route().Path, err)
		}),
	}
	limit := fiberv3limit.New(a.Gate, opts...)

	f := fiber.New()
	f.Use(recover.New())
	f.Get(app.PathHealth, func(c fiber.Ctx) error { return c.JSON(app.Health{Status: "ok"}) })
	f.Get(app.PathMetrics, a.Metrics) // Fiber v3 adapts an http.Handler itself
	f.Get(app.PathReports, authenticate(a.Auth), limit, func(c fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.Context())
		return c.JSON(a.ListReports(c.Context(), t))
	})
	f.Post(app.PathExport, authenticate(a.Auth), limit, func(c fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.Context())
		return c.JSON(a.ExportReport(t))
	})
	f.Get(app.PathProfile, authenticate(a.Auth), limit, func(c fiber.Ctx) error {
		t, _ := gate.TenantFromContext(c.Context())
		return c.JSON(a.GetProfile(t))
	})
	f.Post(app.PathComplete, authenticate(a.Auth), limit, func(c fiber.Ctx) error {
		status, contentType, body := a.Complete(c.Context(), bytes.NewReader(c.Body()))
		c.Set(fiber.HeaderContentType, contentType)
		return c.Status(status).Send(body)
	})
	return f, nil
}

// authenticate verifies the bearer token and stores the tenant in the
// request's context with fiberv3limit.SetTenant, or answers 401.
func authenticate(v *app.Verifier) fiber.Handler {
	return func(c fiber.Ctx) error {
		t, err := v.Authenticate(c.Get(fiber.HeaderAuthorization))
		if err != nil {
			status, contentType, body := app.Unauthorized(err)
			c.Set(fiber.HeaderWWWAuthenticate, app.WWWAuthenticate)
			c.Set(fiber.HeaderContentType, contentType)
			return c.Status(status).Send(body)
		}
		fiberv3limit.SetTenant(c, t)
		return c.Next()
	}
}
