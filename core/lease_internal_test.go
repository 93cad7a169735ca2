package core

import (
	"testing"
	"time"
)

// TestLeaseMapFullKeepsLiveLeases: at its bound the lease map never drops a
// live lease or an acquisition in progress. A check that finds it full of
// live leases takes none (a plain check); once a lease has expired, the
// next check makes room by dropping it. The waiters of an acquisition are
// released when it ends, with its failure.
func TestLeaseMapFullKeepsLiveLeases(t *testing.T) {
	ls := newLeases(map[string]leaseClass{DefaultClass: {size: 5, ttl: time.Second}}, 2)
	bs := []Bucket{{Name: DefaultClass, Quota: PerSecond(10)}}
	now := time.Now()
	k1, k2, k3 := []string{"rl:{a}:default"}, []string{"rl:{b}:default"}, []string{"rl:{c}:default"}
	_, _, _, acq := ls.spend(k1, bs, 1, now, true)
	if acq == nil {
		t.Fatal("first check does not take the lease")
	}
	_, _, wait, _ := ls.spend(k1, bs, 1, now, true)
	if wait == nil {
		t.Fatal("second check does not wait")
	}
	_, _, _, acq2 := ls.spend(k2, bs, 1, now, true)
	if _, _, w, a := ls.spend(k3, bs, 1, now, true); w != nil || a != nil {
		t.Fatal("a full map of live leases gave a third tenant a lease")
	}
	d := newDecision([]BucketState{{Name: DefaultClass, Quota: bs[0].Quota, Tokens: 5}}, 0, ReasonOK, 0, 5)
	ls.release(acq, &d, 4, now.Add(time.Second), nil)
	ls.release(acq2, &d, 4, now.Add(2*time.Second), nil)
	select {
	case <-wait.done:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was stranded")
	}
	if _, _, _, a := ls.spend(k3, bs, 1, now.Add(500*time.Millisecond), true); a != nil {
		t.Fatal("a live lease was dropped to make room")
	}
	for range 4 {
		if _, ok, _, _ := ls.spend(k1, bs, 1, now.Add(500*time.Millisecond), false); !ok {
			t.Fatal("the unspent leased tokens were burned")
		}
	}
	if _, _, _, a := ls.spend(k3, bs, 1, now.Add(1500*time.Millisecond), true); a == nil {
		t.Fatal("an expired lease was not dropped to make room")
	}
	if _, ok, _, _ := ls.spend(k2, bs, 1, now.Add(1500*time.Millisecond), false); !ok {
		t.Fatal("the live lease of k2 was dropped with the expired one")
	}
}
