package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

// fakeClock is a settable clock for client-clock mode.
type fakeClock struct{ us atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.us.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

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

func forEachBackend(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.client(t))
		})
	}
}

// staticResolver answers the same buckets for every request.
func staticResolver(bs ...core.Bucket) core.Resolver {
	return core.ResolverFunc(func(context.Context, core.Tenant, string) ([]core.Bucket, error) {
		return bs, nil
	})
}

func newLimiter(t *testing.T, c redis.UniversalClient, r core.Resolver, opts ...core.Option) *core.Limiter {
	t.Helper()
	opts = append([]core.Option{core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(2 * time.Second)}, opts...)
	l, err := core.New(c, r, opts...)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	return l
}

func check(t *testing.T, l *core.Limiter, tenant string, cost int64) core.Decision {
	t.Helper()
	d, err := l.Check(context.Background(), core.Request{Tenant: core.Tenant{ID: tenant}, Class: "default", Cost: cost})
	if err != nil {
		t.Fatalf("Check(%s, cost %d): %v", tenant, cost, err)
	}
	return d
}

// near reports whether a and b differ by at most eps.
func near(a, b, eps float64) bool { return a-b <= eps && b-a <= eps }
