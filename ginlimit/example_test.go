package ginlimit_test

import (
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/ginlimit"
)

// authenticate stands for your authentication middleware: it verifies the
// credential and stores the tenant in the request context. The limiter
// never reads the tenant from a header.
func authenticate(c *gin.Context) {
	if t, ok := verify(c.GetHeader("Authorization")); ok {
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), t))
	}
	c.Next()
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

	r := gin.New()
	_ = r.SetTrustedProxies(nil)
	r.GET("/healthz", func(c *gin.Context) { c.Status(200) }) // before the limiter: never limited
	// the gate is built, and its configuration checked, once
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		"POST /v1/reports/export": {Class: "export", Cost: 5},
	}))
	if err != nil {
		panic(err)
	}
	r.Use(authenticate, ginlimit.Middleware(g))
	r.GET("/v1/profile", func(c *gin.Context) { c.Status(200) })
	r.POST("/v1/reports/export", func(c *gin.Context) { c.Status(200) })
	_ = r.Run(":8080")
}

// Limit only one group, naming the route's cost from the request.
func ExampleMiddleware_group() {
	var g *gate.Gate // built as in Example
	r := gin.New()
	api := r.Group("/v1", authenticate, ginlimit.Middleware(g, ginlimit.WithRouteFunc(func(c *gin.Context) (gate.Route, bool) {
		// a bulk request costs what it asks for, within the route table's rules
		return gate.Route{Class: "default", Cost: 5}, c.Query("bulk") != ""
	})))
	api.GET("/profile", func(c *gin.Context) { c.Status(200) })
}
