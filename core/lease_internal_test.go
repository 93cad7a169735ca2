package core

import (
	"testing"
	"time"
)

// TestLeaseEvictionReleasesWaiters: when the lease map reaches its bound
// and is emptied while a check is taking a lease, the checks waiting for
// that lease are still released when it ends (they would otherwise wait
// until their own context ended: forever without a deadline).
func TestLeaseEvictionReleasesWaiters(t *testing.T) {
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
	ls.spend(k2, bs, 1, now, true)
	ls.spend(k3, bs, 1, now, true) // the bound is reached: the map is emptied
	d := newDecision([]BucketState{{Name: DefaultClass, Quota: bs[0].Quota, Tokens: 5}}, 0, ReasonOK, 0, 5)
	ls.release(acq, &d, 4, now.Add(time.Second))
	select {
	case <-wait:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was stranded by the eviction")
	}
}
