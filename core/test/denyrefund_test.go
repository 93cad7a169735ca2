package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestDenyCacheSeesAnotherReplicasRefund: two replicas on one bucket. r0
// remembers a denial; r1's settle refunds tokens, which clears only r1's
// deny cache. r0 may keep denying what the store would admit for at most
// the check timeout after the denial it remembered was sent, however far
// its bound is from the cost: then its next check asks the store, which
// admits it.
func TestDenyCacheSeesAnotherReplicasRefund(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			const timeout = time.Second
			// refill is negligible: the bound alone would last 100 s per token
			q := quota.Quota{Capacity: 10, RefillPerSecond: 0.01}
			r := staticResolver(quota.Bucket{Name: "default", Quota: q})
			clock := testkit.NewFakeClock()
			c := b.client(t)
			r0 := newLimiter(t, c, r, core.WithDenyCache(true), core.WithClock(clock.Now), core.WithTimeout(timeout))
			r1, err := core.New(c, r, core.WithPrefix(r0.Keys().Prefix()), core.WithDenyCache(true),
				core.WithClock(clock.Now), core.WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r1.Close() })

			est := check(t, r1, "refund", 5)
			if !est.Allowed || check(t, r1, "refund", 5).Tokens != 0 {
				t.Fatalf("r1's reservations: %+v", est)
			}
			if d := check(t, r0, "refund", 1); d.Allowed || d.Local {
				t.Fatalf("r0's first check: %+v, want a store denial", d)
			}
			if d := check(t, r0, "refund", 1); d.Allowed || !d.Local {
				t.Fatalf("r0's second check: %+v, want a deny-cache denial", d)
			}
			// r1's reservation cost nothing: 5 tokens back in the store
			if f, err := r1.Settle(context.Background(), quota.Tenant{ID: "refund"}, est, 0); err != nil || f != 0 {
				t.Fatalf("r1's refund: %d, %v", f, err)
			}
			clock.Advance(timeout / 2)
			if d := check(t, r0, "refund", 1); d.Allowed || !d.Local {
				t.Fatalf("r0 within the check timeout of its denial: %+v, want a deny-cache denial (the stated bound)", d)
			}
			clock.Advance(timeout / 2)
			d := check(t, r0, "refund", 1)
			if !d.Allowed || d.Local {
				t.Fatalf("r0 a check timeout after its denial, 5 tokens in the store: %+v, want admitted by the store", d)
			}
		})
	}
}
