package app_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The embedded server make demo runs on (miniredis, when REDIS_URL is
// unset) must read every refill rate a tier file can hold: its Lua reads
// numbers that real Redis reads, but not every spelling of them, and the
// script's arguments must be spelled so that both read the same value.
func TestEmbeddedServerReadsEveryRate(t *testing.T) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	for _, rate := range []float64{1e6, 2.5e7, 1e-5, 0.5, 3, 1e12} {
		q := quota.Quota{Capacity: 10, RefillPerSecond: rate, Concurrency: 2}
		l, err := core.New(c, quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
			return []quota.Bucket{{Name: "default", Quota: q}}, nil
		}), core.WithFailurePolicy(core.FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "t"}, Cost: 1})
		if err != nil || !d.Allowed {
			t.Errorf("rate %g: Check = %+v, %v; want an admission from the embedded server", rate, d, err)
		}
		_ = l.Close()
		m.FlushAll()
	}
}
