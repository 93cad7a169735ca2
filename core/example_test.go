package core_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
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
		fmt.Println(d.Allowed, d.Remaining, d.Status(), d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 6 200 0s
	// true 2 200 0s
	// false 2 429 20s
}

// Rendering a denial: the headers and the problem body every adapter sends.
func ExampleDecision_Headers() {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	d := core.Decision{Reason: core.ReasonOverLimit, Bucket: "default", Quota: q, Limit: 10,
		Tokens: 0.5, RetryAfter: 250 * time.Millisecond, ResetAfter: 4750 * time.Millisecond, Cost: 1}
	for _, h := range d.Headers(core.DefaultHeaderStyle, time.Now()) {
		fmt.Printf("%s: %s\n", h.Name, h.Value)
	}
	fmt.Println(d.Status(), string(d.Problem().JSON()))
	// Output:
	// RateLimit-Policy: "default";q=10;w=5
	// RateLimit: "default";r=0;t=1
	// X-RateLimit-Limit: 10
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 5
	// Retry-After: 1
	// 429 {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit of policy \"default\" exceeded: the request costs 1, 0 left; retry in 1 s.","violated-policies":["default"]}
}

// The key scheme: the tenant is the hash tag, escaped.
func ExampleKeys_Bucket() {
	k, _ := keys.New(core.DefaultPrefix)
	for _, id := range []string{"t42", "acme:eu{1}"} {
		key, _ := k.Bucket(id, "export")
		fmt.Println(key)
	}
	// Output:
	// rl:{t42}:export
	// rl:{acme%3Aeu%7B1%7D}:export
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
	// tollgate: WithOverrideCacheSize: size must be positive, got 0
	// tollgate: WithShadowClasses: invalid request: bucket name "no spaces" has byte ' ' at 2; use letters, digits, '_', '-', '.'
}
