package fiberv3limit_test

import (
	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// authenticate stands for your authentication middleware: it verifies the
// credential and stores the tenant for the limiter. The limiter never
// reads the tenant from a header.
func authenticate(c fiber.Ctx) error {
	t, ok := verify(c.Get(fiber.HeaderAuthorization))
	if !ok {
		return fiber.ErrUnauthorized
	}
	fiberv3limit.SetTenant(c, t)
	return c.Next()
}

func verify(string) (quota.Tenant, bool) { return quota.Tenant{ID: "t42", Tier: "free"}, true }

func Example() {
	resolver, _ := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 20, RefillPerSecond: 2},
			"export":  {Capacity: 10, RefillPerSecond: 0.1},
		}},
	}})
	lim, _ := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), resolver)

	app := fiber.New()
	app.Use(recover.New())
	app.Get("/healthz", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) }) // no auth, no limit
	// the gate is built, and its configuration checked, once
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		"POST /v1/reports/export": {Class: "export", Cost: 5},
	}))
	if err != nil {
		panic(err)
	}
	limit := fiberv3limit.New(g)
	v1 := app.Group("/v1", authenticate)
	v1.Get("/profile", limit, func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	v1.Post("/reports/export", limit, func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	_ = app.Listen(":8080")
}
