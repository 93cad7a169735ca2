package echolimit_test

import (
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/echolimit"
)

// authenticate stands for your authentication middleware: it verifies the
// credential and stores the tenant in the request context. The limiter
// never reads the tenant from a header.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if t, ok := verify(c.Request().Header.Get("Authorization")); ok {
			c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(c.Request().Context(), t)))
		}
		return next(c)
	}
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

	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect()
	// the gate is built, and its configuration checked, once
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{"POST /v1/reports/export": {Class: "export", Cost: 5}}))
	if err != nil {
		panic(err)
	}
	e.Use(authenticate, echolimit.Middleware(g,
		echolimit.WithSkipper(func(c echo.Context) bool { return c.Path() == "/healthz" }),
	))
	e.GET("/v1/profile", func(c echo.Context) error { return c.NoContent(200) })
	e.POST("/v1/reports/export", func(c echo.Context) error { return c.NoContent(200) })
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(200) })
	_ = e.Start(":8080")
}
