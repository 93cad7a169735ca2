package core_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// optionCase is one option value: bad ones must make the constructor fail
// with an error that wraps ErrInvalidConfig and names the option; good ones
// must be accepted.
type optionCase[O any] struct {
	name string
	opt  O
	want string // "" : accepted; else a substring of the error
}

func TestLimiterOptionsValidate(t *testing.T) {
	// New makes no network call, so an unreachable address is enough.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	res := oneBucket()
	cases := []optionCase[core.Option]{
		{"fallback share 25", core.WithLocalFallback(25), "tollgate: WithLocalFallback: share must be in (0,1], got 25"},
		{"fallback share 0", core.WithLocalFallback(0), "WithLocalFallback: share must be in (0,1], got 0"},
		{"fallback share -0.5", core.WithLocalFallback(-0.5), "WithLocalFallback"},
		{"fallback share NaN", core.WithLocalFallback(math.NaN()), "WithLocalFallback"},
		{"fallback share 1", core.WithLocalFallback(1), ""},
		{"fallback share 0.25", core.WithLocalFallback(0.25), ""},
		{"leases size 0", core.WithLeases("default", 0, time.Second), "WithLeases: size must be at least 2, got 0"},
		{"leases size 1", core.WithLeases("default", 1, time.Second), "WithLeases: size"},
		{"leases ttl 0", core.WithLeases("default", 10, 0), "WithLeases: ttl must be positive, got 0s"},
		{"leases bad class", core.WithLeases("no spaces", 10, time.Second), "WithLeases: class"},
		{"leases ok", core.WithLeases("default", 10, time.Second), ""},
		{"breaker threshold -1", core.WithCircuitBreaker(-1, time.Second), "WithCircuitBreaker: threshold must be >= 0, got -1"},
		{"breaker cooldown 0", core.WithCircuitBreaker(5, 0), "WithCircuitBreaker: cooldown must be positive, got 0s"},
		{"breaker cooldown -1s", core.WithCircuitBreaker(5, -time.Second), "WithCircuitBreaker: cooldown"},
		{"breaker off", core.WithCircuitBreaker(0, 0), ""},
		{"breaker ok", core.WithCircuitBreaker(3, time.Second), ""},
		{"timeout 0", core.WithTimeout(0), "WithTimeout: timeout must be positive, got 0s"},
		{"timeout -1ms", core.WithTimeout(-time.Millisecond), "WithTimeout"},
		{"settle window 999ms", core.WithSettleWindow(999 * time.Millisecond), "WithSettleWindow: the window must be 1s to 24h, got 999ms"},
		{"settle window 25h", core.WithSettleWindow(25 * time.Hour), "WithSettleWindow"},
		{"timeout ok", core.WithTimeout(time.Millisecond), ""},
		{"tenant label -1", core.WithTenantLabel(-1), "WithTenantLabel: k must be >= 0, got -1"},
		{"tenant label 0", core.WithTenantLabel(0), ""},
		{"failure policy 7", core.WithFailurePolicy(core.FailurePolicy(7)), "WithFailurePolicy: unknown failure policy 7"},
		{"failure policy closed", core.WithFailurePolicy(core.FailClosed), ""},
		{"prefix empty", core.WithPrefix(""), "WithPrefix"},
		{"prefix ok", core.WithPrefix("rl2"), ""},
		{"shadow classes bad", core.WithShadowClasses("default", "a b"), "WithShadowClasses"},
		{"shadow classes ok", core.WithShadowClasses("default"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := core.New(c, res, tc.opt)
			checkOptionErr(t, err, tc.want)
			if l != nil {
				_ = l.Close()
			}
		})
	}
}

func TestGateOptionsValidate(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	l, err := core.New(c, oneBucket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cases := []optionCase[gate.Option]{
		{"header style unknown bit", gate.WithHeaderStyle(render.HeaderStyle(1 << 20)), "gate.WithHeaderStyle: unknown header style bits"},
		{"header style none", gate.WithHeaderStyle(render.HeaderNone), ""},
		{"default route cost -1", gate.WithDefaultRoute(gate.Route{Class: "default", Cost: -1}), "WithDefaultRoute"},
		{"default route bad class", gate.WithDefaultRoute(gate.Route{Class: "a b", Cost: 1}), "WithDefaultRoute"},
		{"default route ok", gate.WithDefaultRoute(gate.Route{Class: "default", Cost: 2}), ""},
		{"routes bad", gate.WithRoutes(gate.Routes{"GET /x": {Class: "a b", Cost: 1}}), "WithRoutes"},
		{"routes ok", gate.WithRoutes(gate.Routes{"GET /x": {Class: "x", Cost: 1}}), ""},
		{"anonymous default tier", gate.WithAnonymous(""), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gate.New(l, tc.opt)
			checkOptionErr(t, err, tc.want)
		})
	}
}

func TestResolverOptionsValidate(t *testing.T) {
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}},
	}}
	cases := []optionCase[quota.Option]{
		{"cache size 0", quota.WithCacheSize(0), "quota.WithCacheSize: size must be positive, got 0"},
		{"cache size -3", quota.WithCacheSize(-3), "got -3"},
		{"cache size ok", quota.WithCacheSize(10), ""},
		{"cache ttl 0", quota.WithCacheTTL(0), "quota.WithCacheTTL: ttl must be positive, got 0s"},
		{"cache ttl ok", quota.WithCacheTTL(time.Second), ""},
		{"override timeout 0", quota.WithTimeout(0), "quota.WithTimeout: timeout must be positive, got 0s"},
		{"override timeout ok", quota.WithTimeout(time.Second), ""},
		{"max lookups 0", quota.WithMaxLookups(0), "quota.WithMaxLookups: n must be positive, got 0"},
		{"max lookups -1", quota.WithMaxLookups(-1), "got -1"},
		{"max lookups ok", quota.WithMaxLookups(1), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := quota.NewResolver(tiers, tc.opt)
			checkOptionErr(t, err, tc.want)
		})
	}
}

func checkOptionErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("valid option refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("invalid option accepted; want an error containing %q", want)
	}
	if !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("error %v does not wrap ErrInvalidConfig", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

// oneBucket resolves every request to one bucket; option validation needs
// no more.
func oneBucket() quota.Resolver {
	return quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: "default", Quota: quota.PerSecond(1)}}, nil
	})
}
