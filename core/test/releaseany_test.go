package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestReleaseAny: a slot group's slot is freed by any limiter of the group,
// its own slot first, else the group's slot of the earliest deadline; a
// slot outside the group (a service's, in the same bucket) never.
func TestReleaseAny(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		res := staticResolver(quota.Bucket{Name: "reports", Quota: quota.Quota{Capacity: 100, RefillPerSecond: 0.001, Concurrency: 3}})
		ga := v.newLimiter(t, c, res, core.WithPrefix(prefix), core.WithSlotGroup("gw"))
		gb := v.newLimiter(t, c, res, core.WithPrefix(prefix), core.WithSlotGroup("gw"))
		svc := v.newLimiter(t, c, res, core.WithPrefix(prefix))
		key := slotsKey(t, ga, "t1", "reports")
		held := func() int64 { return c.ZCard(ctx, key).Val() }
		tenant := quota.Tenant{ID: "t1"}

		s := checkClass(t, svc, "t1", "reports", 1)
		a := checkClass(t, ga, "t1", "reports", 1)
		if s.Slot == nil || a.Slot == nil || held() != 2 {
			t.Fatalf("slots %v %v, %d held", s.Slot, a.Slot, held())
		}
		// b holds none: it frees a's, the group's only one
		if ok, err := gb.ReleaseAny(ctx, tenant, "reports", nil); !ok || err != nil || held() != 1 {
			t.Fatalf("ReleaseAny at b: %v, %v, %d held; want a's freed", ok, err, held())
		}
		// none of the group's left: the service's stays
		if ok, err := gb.ReleaseAny(ctx, tenant, "reports", nil); ok || err != nil || held() != 1 {
			t.Fatalf("ReleaseAny with only the service's slot: %v, %v, %d held; want nothing freed", ok, err, held())
		}
		// a's own slot, gone: another of the group's is freed in its place
		bb := checkClass(t, gb, "t1", "reports", 1)
		if ok, err := ga.ReleaseAny(ctx, tenant, "reports", a.Slot); !ok || err != nil || held() != 1 {
			t.Fatalf("ReleaseAny of a gone slot: %v, %v, %d held; want b's freed", ok, err, held())
		}
		// its own slot while held: that one
		a2 := checkClass(t, ga, "t1", "reports", 1)
		a3 := checkClass(t, ga, "t1", "reports", 1)
		if ok, err := ga.ReleaseAny(ctx, tenant, "reports", a3.Slot); !ok || err != nil || held() != 2 {
			t.Fatalf("ReleaseAny of a held slot: %v, %v, %d held", ok, err, held())
		}
		a2.Slot.Release()
		bb.Slot.Release() // already freed: nothing to remove
		s.Slot.Release()
		if n := held(); n != 0 {
			t.Fatalf("%d held after every release", n)
		}
		// without a group, only its own slot; a class without a limit, nothing
		if ok, err := svc.ReleaseAny(ctx, tenant, "reports", nil); ok || err != nil {
			t.Fatalf("ReleaseAny without a group: %v, %v", ok, err)
		}
		plain := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 1}}), core.WithPrefix(prefix), core.WithSlotGroup("gw"))
		if ok, err := plain.ReleaseAny(ctx, tenant, "default", nil); ok || err != nil {
			t.Fatalf("ReleaseAny of a class without a limit: %v, %v", ok, err)
		}
		if _, err := plain.ReleaseAny(ctx, quota.Tenant{}, "default", nil); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("ReleaseAny without a tenant: %v", err)
		}
	})
}

func TestWithSlotGroupValidates(t *testing.T) {
	c := redistest.Client(t)
	for _, name := range []string{"", "a/b", "x y"} {
		if _, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 1}}), core.WithSlotGroup(name)); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("WithSlotGroup(%q): %v", name, err)
		}
	}
}
