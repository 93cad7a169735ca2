package core_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestDenyCacheAfterClockStepBack: in client-clock mode, a replica whose
// clock stepped back does not keep denying from its deny cache what the
// store would admit: the store keeps the later stamp, so tokens another
// replica's refill put there are admitted.
func TestDenyCacheAfterClockStepBack(t *testing.T) {
	q := quota.Quota{Capacity: 2, RefillPerSecond: 1}
	t0 := time.Unix(1_700_000_000, 0)
	var aAt, bAt atomic.Int64
	aAt.Store(t0.UnixMicro())
	bAt.Store(t0.UnixMicro())
	c := backends[0].client(t)
	a := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithDenyCache(true),
		core.WithClock(func() time.Time { return time.UnixMicro(aAt.Load()) }))
	b, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithPrefix(a.Keys().Prefix()),
		core.WithClock(func() time.Time { return time.UnixMicro(bAt.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	if d := check(t, a, "step", 2); !d.Allowed {
		t.Fatalf("first check: %+v", d)
	}
	if d := check(t, a, "step", 1); d.Allowed {
		t.Fatalf("empty bucket admitted: %+v", d)
	}
	// b, 5 s later, finds the bucket full again and takes one token
	bAt.Add((5 * time.Second).Microseconds())
	if d := check(t, b, "step", 1); !d.Allowed || d.Tokens != 1 {
		t.Fatalf("b after 5 s: %+v, want admitted with 1 left", d)
	}
	// a's clock steps back 10 s and runs 5 s: behind the stored stamp, the
	// store refills nothing and admits from the token b left
	aAt.Add((-5 * time.Second).Microseconds())
	d := check(t, a, "step", 1)
	if !d.Allowed || d.Local {
		t.Fatalf("a after its clock stepped back: %+v, want admitted by the store", d)
	}
}
