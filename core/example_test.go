package core_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// The minimal wiring: tiers, a resolver, a limiter, one check.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: exampleRedisAddr(), ContextTimeoutEnabled: true})
	defer client.Close()

	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 20, RefillPerSecond: 2},   // a burst of 20, then 2/s
			"export":  {Capacity: 10, RefillPerSecond: 0.1}, // one token every 10 s
		}},
	}}
	resolver, err := quota.NewResolver(tiers)
	if err != nil {
		fmt.Println(err)
		return
	}
	lim, err := core.New(client, resolver, core.WithPrefix(fmt.Sprintf("example%d", time.Now().UnixNano())))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The tenant comes from the verified token, never from a header.
	tenant := quota.Tenant{ID: "t42", Tier: "free"}
	for range 3 {
		d, err := lim.Allow(context.Background(), tenant, "export", 4)
		if err != nil {
			fmt.Println("store:", err)
			return
		}
		// a job would sleep d.RetryAfter before trying again
		fmt.Println(d.Allowed, d.Remaining, render.Status(d), d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 6 200 0s
	// true 2 200 0s
	// false 2 429 20s
}

func exampleRedisAddr() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		if o, err := redis.ParseURL(u); err == nil {
			return o.Addr
		}
	}
	return "127.0.0.1:6379"
}

// An option given a value it cannot use makes the constructor fail, naming
// the option; nothing is silently ignored.
func ExampleNew_invalidOption() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(10)}},
	}}
	res, _ := quota.NewResolver(tiers)

	_, err := core.New(client, res, core.WithLocalFallback(25))
	fmt.Println(err)
	_, err = core.New(client, res, core.WithLeases("upload", 20, 0))
	fmt.Println(err)
	_, err = quota.NewResolver(tiers, quota.WithCacheSize(0))
	fmt.Println(err)
	_, err = core.New(client, res, core.WithShadowClasses("no spaces"))
	fmt.Println(err)
	// Output:
	// tollgate: WithLocalFallback: share must be in (0,1], got 25
	// tollgate: WithLeases: ttl must be positive, got 0s
	// tollgate: quota.WithCacheSize: size must be positive, got 0
	// tollgate: WithShadowClasses: invalid request: bucket name "no spaces" has byte ' ' at 2; use letters, digits, '_', '-', '.'
}
