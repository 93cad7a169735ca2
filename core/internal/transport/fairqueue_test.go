package transport

import (
	"slices"
	"testing"
)

// TestFairQueueRoundRobin: the waiting checks are served one per tenant in
// turn, each tenant's in the order they came: a tenant with one check
// waiting behind a flooding tenant's hundred is served second, not 101st.
func TestFairQueueRoundRobin(t *testing.T) {
	q := newFairQueue[string]()
	for i := range 100 {
		q.push("flood", "f"+string(rune('0'+i%10)))
	}
	q.push("calm", "c")
	q.push("other", "o1")
	q.push("other", "o2")
	var got []string
	for c, ok := q.pop(); ok; c, ok = q.pop() {
		got = append(got, c)
	}
	if len(got) != 103 || q.n != 0 || len(q.ring) != 0 || len(q.byTenant) != 0 {
		t.Fatalf("popped %d, %d left (%d tenants)", len(got), q.n, len(q.ring))
	}
	if want := []string{"f0", "c", "o1", "f1", "o2", "f2", "f3"}; !slices.Equal(got[:7], want) {
		t.Fatalf("served %v, want %v", got[:7], want)
	}
	// a tenant that comes back after its queue emptied joins the ring anew
	q.push("calm", "c2")
	if c, ok := q.pop(); !ok || c != "c2" {
		t.Fatalf("pop after refill: %q %v", c, ok)
	}
	// emptied tenant queues are reused by the next tenants to wait, each
	// carrying its own checks, and a tenant's first check then allocates
	// nothing
	q.push("x", "x1")
	q.push("y", "y1")
	q.push("x", "x2")
	got = got[:0]
	for c, ok := q.pop(); ok; c, ok = q.pop() {
		got = append(got, c)
	}
	if want := []string{"x1", "y1", "x2"}; !slices.Equal(got, want) || len(q.byTenant) != 0 {
		t.Fatalf("after reuse served %v (%d tenants left), want %v", got, len(q.byTenant), want)
	}
	if n := testing.AllocsPerRun(100, func() {
		q.push("z", "z1")
		q.pop()
	}); n != 0 {
		t.Fatalf("a tenant's first check waiting allocates %v times, want 0", n)
	}
}

// TestTenantSharesBound: one tenant holds at most its share; another
// tenant, and the same tenant once a check leaves, still get in.
func TestTenantSharesBound(t *testing.T) {
	s := newTenantShares(3)
	for i := range 3 {
		if !s.take("flood") {
			t.Fatalf("take %d refused below the share", i)
		}
	}
	if s.take("flood") {
		t.Fatal("a fourth check got past a share of 3")
	}
	if !s.take("calm") {
		t.Fatal("another tenant was refused by the flooder's share")
	}
	s.leave("flood")
	if !s.take("flood") {
		t.Fatal("a check left, yet the tenant is still refused")
	}
}
