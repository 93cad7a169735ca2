package core_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// FuzzCheck drives arbitrary tenants, classes, costs, quotas and clock steps
// through the real script on a real Redis. Bad input must come back as an
// invalid-request or invalid-quota error, never as a script (store) error,
// and every decision must be coherent: remaining within [0, capacity], no
// negative durations, a denial never charged.
func FuzzCheck(f *testing.F) {
	f.Add("t42", "default", int64(1), int64(10), 2.0, int64(0))
	f.Add("{}", "a", int64(0), int64(1), 1e-6, int64(-1e12))
	f.Add("a\x00b\xff", "x.y-z_1", int64(11), int64(10), 1e12, int64(1e15))
	f.Add("", "", int64(-1), int64(0), math.NaN(), int64(0))
	f.Add("t", "default", int64(1<<40), int64(1<<40), 1e7, int64(1))
	f.Add("t", "default", int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), int64(math.MinInt64))
	c := redistest.Client(f)
	prefix := redistest.Prefix(f)
	f.Fuzz(func(t *testing.T, tenant, class string, cost, capacity int64, rate float64, step int64) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		q := quota.Quota{Capacity: capacity, RefillPerSecond: rate}
		r := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
			return []quota.Bucket{{Name: "b", Quota: q}, {Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: quota.MaxCapacity, RefillPerSecond: 1e9}}}, nil
		})
		l, err := core.New(c, r, core.WithPrefix(prefix), core.WithClock(clock), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: tenant}, Class: class, Cost: cost})
			if errors.Is(err, core.ErrStore) {
				t.Fatalf("store error for tenant %q class %q cost %d quota %+v: %v", tenant, class, cost, q, err)
			}
			if err != nil {
				if !errors.Is(err, core.ErrInvalidRequest) && !errors.Is(err, quota.ErrInvalid) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if d.Remaining < 0 || d.Remaining > d.Limit || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("incoherent decision %+v", d)
			}
			if !d.Allowed && d.Buckets[0].Tokens < 0 {
				t.Fatalf("a denial charged: %+v", d)
			}
			if i == 0 {
				now = now.Add(time.Duration(step))
			}
		}
	})
}
