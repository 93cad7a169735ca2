package core_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// backend is a real Redis the limiter tests run against.
type backend struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

// backends: every script test runs on a standalone server and on a Cluster,
// because CROSSSLOT and undeclared keys fail only on a Cluster.
var backends = []backend{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }},
}

// variant is a set of limiter options a store test runs under.
type variant struct {
	name string
	opts []core.Option
}

// variants: every store test runs with each optimisation off and with
// every one on, so that batching and the deny cache are held to the same
// arithmetic and concurrency tests as single calls. forEachVariant and
// forEachBackend hand the variant to the test, whose v.newLimiter applies
// it; a test's own options come after it and win.
var variants = []variant{
	{"plain", []core.Option{core.WithBatching(false), core.WithDenyCache(false)}},
	{"batch+deny", []core.Option{core.WithBatching(true), core.WithDenyCache(true)}},
}

// options returns the variant's options, safe to append to.
func (v variant) options() []core.Option { return slices.Clip(v.opts) }

// newLimiter is newLimiter under the variant's options.
func (v variant) newLimiter(t *testing.T, c redis.UniversalClient, r quota.Resolver, opts ...core.Option) *core.Limiter {
	t.Helper()
	return newLimiter(t, c, r, append(v.options(), opts...)...)
}

// forEachVariant runs f under every variant (see variants).
func forEachVariant(t *testing.T, f func(t *testing.T, v variant)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { f(t, v) })
	}
}

// forEachBackend runs f, in parallel, on every backend under every variant.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend, v variant)) {
	for _, b := range backends {
		for _, v := range variants {
			t.Run(b.name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				f(t, b, v)
			})
		}
	}
}

// staticResolver answers the same buckets for every request.
func staticResolver(bs ...quota.Bucket) quota.Resolver {
	return quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return bs, nil
	})
}

func newLimiter(t *testing.T, c redis.UniversalClient, r quota.Resolver, opts ...core.Option) *core.Limiter {
	t.Helper()
	base := []core.Option{core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(2 * time.Second)}
	l, err := core.New(c, r, append(base, opts...)...)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func check(t *testing.T, l *core.Limiter, tenant string, cost int64) core.Decision {
	t.Helper()
	d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: tenant}, Class: "default", Cost: cost})
	if err != nil {
		t.Fatalf("Check(%s, cost %d): %v", tenant, cost, err)
	}
	return d
}

// near reports whether a and b differ by at most eps.
func near(a, b, eps float64) bool { return a-b <= eps && b-a <= eps }

// testTiers is the resolver tests' tier set (core's resolver_test.go).
var testTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
	"free": {Classes: map[string]quota.Quota{"default": {Capacity: 20, RefillPerSecond: 2}}, Ceiling: &quota.Quota{Capacity: 100, RefillPerSecond: 10}},
	"pro":  {Classes: map[string]quota.Quota{"default": {Capacity: 200, RefillPerSecond: 50}}},
}}

// flushScripts empties the script cache of c's server, or of every master
// of a Cluster, so that the next EVALSHA meets NOSCRIPT.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	} else {
		err = c.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}
