package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestConcurrencyClientClockSkew holds the bound docs/semantics.md states
// for client-clock mode: two replicas (limiters on one prefix) whose
// clocks differ by less than two thirds of the lease keep a limit of 1,
// also after the holder's renewal; at a skew of one lease the replica
// ahead admits a second request (the stated break).
func TestConcurrencyClientClockSkew(t *testing.T) {
	const lease = 3 * time.Second
	for _, tc := range []struct {
		name  string
		skew  time.Duration
		holds bool
	}{
		{"skew 0.6 lease: the limit holds", lease * 6 / 10, true},
		{"skew of one lease: the replica ahead admits past it", lease, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Client(t)
			prefix := redistest.Prefix(t)
			res := staticResolver(quota.Bucket{Name: "reports", Quota: quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 1}})
			replica := func(skew time.Duration) *core.Limiter {
				l, err := core.New(c, res, core.WithPrefix(prefix), core.WithTimeout(lease/3), core.WithConcurrencySlots(lease, 0),
					core.WithClock(func() time.Time { return time.Now().Add(skew) }))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			holder, ahead := replica(0), replica(tc.skew)
			d := checkClass(t, holder, "t1", "reports", 1)
			if d.Reason != core.ReasonOK || d.Slot == nil {
				t.Fatalf("the first request: %+v", d)
			}
			defer d.Slot.Release()
			second := checkClass(t, ahead, "t1", "reports", 1)
			if second.Slot != nil {
				defer second.Slot.Release()
			}
			if !tc.holds {
				if second.Reason != core.ReasonOK {
					t.Fatalf("at a skew of one lease the replica ahead answered %v; docs/semantics.md says it admits past the limit", second.Reason)
				}
				return
			}
			if second.Reason != core.ReasonConcurrencyLimit {
				t.Fatalf("skew %v: the replica ahead answered %v, want a concurrency denial", tc.skew, second.Reason)
			}
			// after the holder's renewal (seen as its deadline moving on)
			key := slotsKey(t, holder, "t1", "reports")
			first := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
			if len(first) != 1 {
				t.Fatalf("slots %v, want the holder's", first)
			}
			waitFor(t, lease, "the holder's renewal", func() bool {
				zs := c.ZRangeWithScores(context.Background(), key, 0, -1).Val()
				return len(zs) == 1 && zs[0].Score > first[0].Score
			})
			if d := checkClass(t, ahead, "t1", "reports", 1); d.Reason != core.ReasonConcurrencyLimit {
				if d.Slot != nil {
					d.Slot.Release()
				}
				t.Fatalf("after the renewal the replica ahead answered %v, want a concurrency denial", d.Reason)
			}
		})
	}
}
