package denycache

import (
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

func TestCheckProvesOnlyWhatTheStoreWouldDeny(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 1}
	quotaOf := func(int) quota.Quota { return q }
	keys := []string{"t:{a}:default"}
	t0 := time.Unix(1000, 0)
	c := New(10, time.Hour)
	c.Remember(keys, []quota.Quota{q}, []float64{0.5}, t0)

	if tok, ok := c.Check(keys, quotaOf, 2, t0.Add(time.Second)); !ok || tok[0] != 1.5 {
		t.Fatalf("1.5 tokens, cost 2: got %v, %v; want a proven denial with 1.5", tok, ok)
	}
	if _, ok := c.Check(keys, func(int) quota.Quota { return quota.Quota{Capacity: 10, RefillPerSecond: 2} }, 2, t0.Add(time.Second)); ok {
		t.Fatal("a changed quota proved a denial")
	}
	if _, ok := c.Check(keys, quotaOf, 2, t0.Add(-time.Second)); ok {
		t.Fatal("a clock step back proved a denial")
	}
	if _, ok := c.Check(keys, quotaOf, 2, t0.Add(time.Second)); ok {
		t.Fatal("the entry survived a clock step back")
	}

	c.Remember(keys, []quota.Quota{q}, []float64{0.5}, t0)
	if _, ok := c.Check(keys, quotaOf, 2, t0.Add(2*time.Second)); ok {
		t.Fatal("2.5 tokens, cost 2: the store would admit it")
	}
	if _, ok := c.Check(keys, quotaOf, 1, t0); ok {
		t.Fatal("the entry survived a check it could not prove")
	}

	c.Remember(keys, []quota.Quota{q}, []float64{0}, t0)
	c.Forget("t:{b}")
	if _, ok := c.Check(keys, quotaOf, 1, t0); !ok {
		t.Fatal("another tenant's Forget dropped the entry")
	}
	c.Forget("t:{a}")
	if _, ok := c.Check(keys, quotaOf, 1, t0); ok {
		t.Fatal("Forget kept the tenant's entry")
	}
	if _, ok := c.Check(keys, quotaOf, 11, t0); ok {
		t.Fatal("an empty cache proved a denial")
	}
}

// TestEntriesLastLessThanMaxAge: however far the bound is below the cost
// (a debt), an entry proves nothing from maxAge after its request was sent:
// another replica's refund may have raised the balance since.
func TestEntriesLastLessThanMaxAge(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 0.001}
	quotaOf := func(int) quota.Quota { return q }
	keys := []string{"t:{a}:default"}
	t0 := time.Unix(1000, 0)
	c := New(10, 100*time.Millisecond)
	c.Remember(keys, []quota.Quota{q}, []float64{-1000}, t0)
	if _, ok := c.Check(keys, quotaOf, 1, t0.Add(100*time.Millisecond-time.Nanosecond)); !ok {
		t.Fatal("a debt of 1000 did not prove a denial within maxAge")
	}
	if _, ok := c.Check(keys, quotaOf, 1, t0.Add(100*time.Millisecond)); ok {
		t.Fatal("an entry maxAge old proved a denial")
	}
	if _, ok := c.Check(keys, quotaOf, 1, t0); ok {
		t.Fatal("the entry survived its maxAge")
	}
}
