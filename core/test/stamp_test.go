package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestStampIsTheStoresClock: an admission's bucket states carry the time
// the store keeps with the balance (the server's clock, read by the script
// during the call), a denial none; with WithClock, the limiter's clock.
func TestStampIsTheStoresClock(t *testing.T) {
	q := quota.Quota{Capacity: 2, RefillPerSecond: 0.001}
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		for _, n := range []int{1, 2} {
			bs := []quota.Bucket{{Name: "default", Quota: q}, {Name: "ceiling", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 1}}}[:n]
			lim := v.newLimiter(t, b.client(t), staticResolver(bs...))
			tenant := "stamp-" + string(rune('0'+n))
			for i := range 2 {
				before := time.Now().Truncate(time.Microsecond)
				d := check(t, lim, tenant, 1)
				after := time.Now()
				if !d.Allowed || len(d.Buckets) != n {
					t.Fatalf("%d buckets, check %d: %+v, want admitted", n, i, d)
				}
				for _, s := range d.Buckets {
					if s.Stamp.Before(before) || s.Stamp.After(after) {
						t.Fatalf("%d buckets, check %d: bucket %s stamp %v outside the call [%v, %v]", n, i, s.Name, s.Stamp, before, after)
					}
				}
			}
			d := check(t, lim, tenant, 1)
			if d.Allowed {
				t.Fatalf("%d buckets: third check admitted: %+v", n, d)
			}
			for _, s := range d.Buckets {
				if !s.Stamp.IsZero() {
					t.Fatalf("%d buckets: denial carries stamp %v for %s, want none", n, s.Stamp, s.Name)
				}
			}
		}
	})

	t.Run("client clock", func(t *testing.T) {
		at := time.UnixMicro(1_700_000_000_123_456)
		lim := newLimiter(t, backends[0].client(t), staticResolver(quota.Bucket{Name: "default", Quota: q}),
			core.WithClock(func() time.Time { return at }))
		d, err := lim.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "clock"}, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("Check: %+v, %v", d, err)
		}
		if got := d.Buckets[0].Stamp; !got.Equal(at) {
			t.Fatalf("stamp %v, want the limiter's clock %v", got, at)
		}
	})
}
