package lease

import (
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// TestMapFullKeepsLiveLeases: at its bound the lease map never drops a
// live lease or an acquisition in progress. A check that finds it full of
// live leases takes none (a plain check); once a lease has expired, the
// next check makes room by dropping it. The waiters of an acquisition are
// released when it ends, with its failure.
func TestMapFullKeepsLiveLeases(t *testing.T) {
	ask := Class{Size: 5, TTL: time.Second}
	ls := New(map[string]Class{"default": ask}, 2)
	q := quota.Quota{Capacity: 10, RefillPerSecond: 10}
	quotaOf := func(int) quota.Quota { return q }
	now := time.Now()
	k1, k2, k3 := []string{"rl:{a}:default"}, []string{"rl:{b}:default"}, []string{"rl:{c}:default"}
	// first seen: a plain check, then (demand without time between) a lease
	if _, _, _, a, _ := ls.Spend(k1, quotaOf, 1, now, ask); a != nil {
		t.Fatal("a bucket set first seen takes a lease")
	}
	_, _, _, acq, size := ls.Spend(k1, quotaOf, 1, now, ask)
	if acq == nil || size != 5 {
		t.Fatal("first check does not take the lease")
	}
	_, _, wait, _, _ := ls.Spend(k1, quotaOf, 1, now, ask)
	if wait == nil {
		t.Fatal("second check does not wait")
	}
	ls.Spend(k2, quotaOf, 1, now, ask)
	_, _, _, acq2, _ := ls.Spend(k2, quotaOf, 1, now, ask)
	if _, _, w, a, _ := ls.Spend(k3, quotaOf, 1, now, ask); w != nil || a != nil {
		t.Fatal("a full map of live leases gave a third tenant a lease")
	}
	ls.Release(acq, []quota.Quota{q}, []float64{5}, 4, now, now.Add(time.Second), nil)
	ls.Release(acq2, []quota.Quota{q}, []float64{5}, 4, now, now.Add(2*time.Second), nil)
	select {
	case <-wait.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was stranded")
	}
	if _, _, _, a, _ := ls.Spend(k3, quotaOf, 1, now.Add(500*time.Millisecond), ask); a != nil {
		t.Fatal("a live lease was dropped to make room")
	}
	for i := range 4 {
		tokens, ok, _, _, _ := ls.Spend(k1, quotaOf, 1, now.Add(500*time.Millisecond), Class{})
		if !ok {
			t.Fatal("the unspent leased tokens were burned")
		}
		if want := 5 + float64(3-i); tokens[0] != want {
			t.Fatalf("spend %d: the lease states %v tokens, want %v", i+1, tokens[0], want)
		}
	}
	ls.Spend(k3, quotaOf, 1, now.Add(1500*time.Millisecond), ask)
	if _, _, _, a, _ := ls.Spend(k3, quotaOf, 1, now.Add(1500*time.Millisecond), ask); a == nil {
		t.Fatal("an expired lease was not dropped to make room")
	}
	if _, ok, _, _, _ := ls.Spend(k2, quotaOf, 1, now.Add(1500*time.Millisecond), Class{}); !ok {
		t.Fatal("the live lease of k2 was dropped with the expired one")
	}
	if _, ok, _, _, _ := ls.Spend(k2, func(int) quota.Quota { return quota.Quota{Capacity: 20, RefillPerSecond: 10} }, 1, now.Add(1500*time.Millisecond), Class{}); ok {
		t.Fatal("a lease was spent after its quota changed")
	}
}
