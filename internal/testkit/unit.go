package testkit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// UnitTiers are the quotas of an adapter's own unit tests (beside the
// suite): one tier, free, with a default class of 2 tokens and an export
// class of 10, both refilling at 0.01/s, so that a test never sees a
// refill. Its headers are then RateLimit-Policy "default";q=2;w=200 and a
// denial's Retry-After is 100.
var UnitTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
	"default": {Capacity: 2, RefillPerSecond: 0.01},
	"export":  {Capacity: 10, RefillPerSecond: 0.01},
}}}}

// NewUnitLimiter returns a limiter on UnitTiers for an adapter's own unit
// tests, on the shared standalone Redis (redistest); see NewLimiter.
func NewUnitLimiter(t testing.TB, opts ...core.Option) *core.Limiter {
	t.Helper()
	return NewLimiter(t, redistest.Client(t), UnitTiers, opts...)
}

// NewLimiter returns a limiter on tiers over c for a test, under a key
// prefix of its own, with a 5 s timeout so that a loaded machine does not
// turn a test into a store failure. opts come after those. A configuration
// error fails t.
func NewLimiter(t testing.TB, c redis.UniversalClient, tiers quota.Tiers, opts ...core.Option) *core.Limiter {
	t.Helper()
	res, err := quota.NewResolver(tiers)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]core.Option{core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5 * time.Second)}, opts...)
	lim, err := core.New(c, res, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// NewUnitGate returns a gate over lim (see NewUnitLimiter) with opts, for
// an adapter's own unit tests; a configuration error fails t.
func NewUnitGate(t testing.TB, lim *core.Limiter, opts ...gate.Option) *gate.Gate {
	t.Helper()
	g, err := gate.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
