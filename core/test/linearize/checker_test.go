package linearize_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker on small made-up histories: what it must accept and what it
// must reject, without Redis. One tenant, 2 tokens, one a second.

const base = int64(1_700_000_000_000_000) // µs

// call is an op of tenant "k" called ms milliseconds after base, returning
// 1 ms later; an admission's stamp is 0.5 ms into the call.
func call(ms int64, k kind, cost int64, tokens float64) op {
	o := op{Key: "k", Kind: k, Cost: cost, Tokens: tokens, Call: (base + ms*1000) * 1000, Return: (base + ms*1000 + 1000) * 1000}
	if k == admitted {
		o.Stamp = base + ms*1000 + 500
	}
	return o
}

func TestCheckerOnMadeUpHistories(t *testing.T) {
	q := quota{capacity: 2, rate: 1}
	// after a charge of 1 at 0 ms, what a charge of cost leaves at ms
	after := func(ms, cost int64) float64 { return q.refill(1, base+500, base+ms*1000+500) - float64(cost) }
	first := call(0, admitted, 1, 1)
	leaseTaken := call(0, admitted, 1, 1) // a lease of 2: the store is at 0
	leaseTaken.Lease = 2
	smallLease := leaseTaken // a lease of 2 where the largest is 4
	smallLease.Lease = 4
	// a replica 1 s behind, in client-clock mode, takes the last token at
	// the stamp another replica's call wrote (its own clock is behind it)
	lagging := call(20, admitted, 1, 0)
	lagging.Stamp, lagging.OffLo, lagging.OffHi = base+500, -1_000_000, -1_000_000
	// a reservation of cost at ms leaving tokens, of a max wait of wait ms
	rsv := func(ms int64, k kind, cost int64, tokens float64, wait int64) op {
		o := call(ms, k, cost, tokens)
		o.MaxWait = wait * 1000
		if k == reserved {
			o.Stamp = base + ms*1000 + 500
		}
		return o
	}
	for _, tt := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"a reservation into debt within its max wait", []op{first, rsv(10, reserved, 2, after(10, 2), 2000)}, porcupine.Ok},
		{"a reservation deeper than its max wait", []op{first, rsv(10, reserved, 2, after(10, 2), 500)}, porcupine.Illegal},
		{"a reservation that must wait, not charged", []op{first, rsv(10, reserved, 2, after(10, 0), 2000)}, porcupine.Illegal},
		{"a check admitted from a reservation's debt", []op{first, rsv(10, reserved, 2, after(10, 2), 2000), call(500, admitted, 1, after(500, 3))}, porcupine.Illegal},
		{"a check denied during a reservation's debt", []op{first, rsv(10, reserved, 2, after(10, 2), 2000), call(500, denied, 1, after(500, 2))}, porcupine.Ok},
		{"a reservation refused beyond its max wait", []op{first, rsv(10, reserveDenied, 2, after(10, 0), 500)}, porcupine.Ok},
		{"a reservation refused that fitted its max wait", []op{first, rsv(10, reserveDenied, 2, after(10, 0), 2000)}, porcupine.Illegal},
		{"a lost reservation charged once", []op{first, rsv(10, reserveFailed, 2, 0, 2000), call(20, denied, 1, after(20, 2))}, porcupine.Ok},
		{"a lost reservation never run", []op{first, rsv(10, reserveFailed, 2, 0, 2000), call(20, admitted, 1, after(20, 1))}, porcupine.Ok},
		{"a lost reservation charged twice", []op{first, rsv(10, reserveFailed, 2, 0, 2000), call(20, denied, 1, after(20, 4)-0.01)}, porcupine.Illegal},
		{"a cancel giving back the reservation", []op{first, rsv(10, reserved, 2, after(10, 2), 2000), call(20, cancelled, 2, 0), call(30, admitted, 1, after(30, 1))}, porcupine.Ok},
		{"a cancel giving back more than the reservation", []op{first, rsv(10, reserved, 2, after(10, 2), 2000), call(20, cancelled, 2, 0), call(30, admitted, 2, after(30, 2))}, porcupine.Illegal},
		{"charges in order", []op{first, call(10, admitted, 1, after(10, 1)), call(20, denied, 1, after(20, 1))}, porcupine.Ok},
		{"a denial reporting a refill its call had no time for", []op{first, call(10, admitted, 1, after(10, 1)), call(20, denied, 1, after(20, 1)+0.01)}, porcupine.Illegal},
		{"the same token spent twice", []op{first, call(10, admitted, 1, after(10, 0))}, porcupine.Illegal},
		{"a balance off by a rounding", []op{first, call(10, admitted, 1, after(10, 1)+1e-12)}, porcupine.Illegal},
		{"a stamp outside its call", []op{func() op { o := first; o.Stamp += 5000; return o }()}, porcupine.Illegal},
		{"a denial with enough tokens", []op{call(0, denied, 1, 1.5)}, porcupine.Illegal},
		{"a denial reporting more than the bucket holds", []op{first, call(10, denied, 2, 1.9)}, porcupine.Illegal},
		{"a deny-cache denial of a full bucket", []op{call(0, localDenied, 1, 0)}, porcupine.Illegal},
		{"a deny-cache denial by a replica 1 s behind, of 1 token", []op{first, func() op { o := call(10, localDenied, 1, 0); o.OffLo, o.OffHi = -1_000_000, -1_000_000; return o }()}, porcupine.Ok},
		{"a deny-cache denial by a replica 1 s behind, of a full bucket", []op{func() op { o := call(10, localDenied, 1, 0); o.OffLo, o.OffHi = -1_000_000, -1_000_000; return o }()}, porcupine.Illegal},
		{"a deny-cache denial of an empty one", []op{call(0, admitted, 2, 0), call(10, localDenied, 1, 0)}, porcupine.Ok},
		{"a lost reply never run", []op{first, call(10, ambiguous, 1, 0), call(20, admitted, 1, after(20, 1))}, porcupine.Ok},
		{"a lost reply charged once", []op{first, call(10, ambiguous, 1, 0), call(1500, admitted, 1, after(1500, 2))}, porcupine.Ok},
		{"a lost reply charged twice", []op{first, call(10, ambiguous, 1, 0), call(1900, admitted, 1, after(1900, 3))}, porcupine.Illegal},
		{"a lagging replica's admission at the stamp a lost reply wrote", []op{call(0, ambiguous, 1, 0), lagging}, porcupine.Ok},
		{"a lagging replica's admission at a stamp nobody wrote", []op{lagging}, porcupine.Illegal},
		{"an admission of 2 from a balance of 1.01", []op{first, call(10, admitted, 2, after(10, 2))}, porcupine.Illegal},
		{"an admission of 2 from a balance of 1.01, after a lost reply", []op{first, call(5, ambiguous, 1, 0), call(10, admitted, 2, after(10, 2))}, porcupine.Illegal},
		{"a lease taken", []op{leaseTaken, call(10, denied, 1, q.refill(0, base+500, base+10000))}, porcupine.Ok},
		{"a lease not taken", []op{leaseTaken, call(10, denied, 1, q.refill(1, base+500, base+10000))}, porcupine.Illegal},
		{"a lease smaller than the largest", []op{smallLease, call(10, denied, 1, q.refill(0, base+500, base+10000))}, porcupine.Ok},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := linearizable(quotas{b: [nb]quota{q, q}}, tt.ops, nil, 10*time.Second, false); got != tt.want {
				t.Fatalf("%s, want %s", got, tt.want)
			}
		})
	}
}

// TestBoundsOnMadeUpHistories: the degraded answers' bounds reject what
// exceeds them.
func TestBoundsOnMadeUpHistories(t *testing.T) {
	cfg := config{Capacity: 2, Rate: 1, Tenants: []string{"k"}}
	many := func(n int, k kind, fallback bool) []op {
		var ops []op
		for i := range n {
			o := call(int64(i), k, 1, 0)
			o.Fallback, o.Allowed = fallback, true
			ops = append(ops, o)
		}
		return ops
	}
	leases := cfg
	leases.Lease = 2
	// 2 tokens plus 3 replicas' leases of 2: 8 in a few milliseconds
	if bad := degradedBounds(leases, many(8, leased, false)); len(bad) != 0 {
		t.Fatalf("within the lease bound: %v", bad)
	}
	if bad := degradedBounds(leases, many(9, leased, false)); len(bad) == 0 {
		t.Fatal("9 tokens in 9 ms, lease bound 8: not caught")
	}
	fb := cfg
	fb.Fallback = 0.5 // a local bucket of 1 token, 0.5 a second
	if bad := degradedBounds(fb, many(1, ambiguous, true)); len(bad) != 0 {
		t.Fatalf("within the fallback bound: %v", bad)
	}
	if bad := degradedBounds(fb, many(2, ambiguous, true)); len(bad) == 0 {
		t.Fatal("2 fallback admissions in 2 ms, local bucket of 1: not caught")
	}
	open := cfg
	failed := call(0, ambiguous, 1, 0)
	failed.Reason, failed.Allowed = "failed_open", true
	if bad := degradedBounds(open, []op{failed}); len(bad) != 0 {
		t.Fatalf("failed_open under fail-open: %v", bad)
	}
	closed := cfg
	closed.Policy = 1
	if bad := degradedBounds(closed, []op{failed}); len(bad) == 0 {
		t.Fatal("failed_open under fail-closed: not caught")
	}
	// a request whose classes cost differently is answered by the failure
	// policy even with a local fallback
	mixed := failed
	mixed.AlsoCost = 2
	if bad := degradedBounds(fb, []op{mixed}); len(bad) != 0 {
		t.Fatalf("failed_open of a request of two costs, fail-open with a fallback: %v", bad)
	}
	if bad := degradedBounds(fb, []op{failed}); len(bad) == 0 {
		t.Fatal("failed_open of a request of one cost with a fallback: not caught")
	}
	fbClosed := fb
	fbClosed.Policy = 1
	if bad := degradedBounds(fbClosed, []op{mixed}); len(bad) == 0 {
		t.Fatal("failed_open of a request of two costs under fail-closed: not caught")
	}
}

// TestCheckerOnMadeUpMixes: the multi-bucket, slot and settle parts of the
// model on made-up histories. Class a: 2 tokens, one a second; class b:
// 4 tokens, 2 a second; for slots, 2 of them, and class a of 10 tokens
// that never refill (every balance exact).
func TestCheckerOnMadeUpMixes(t *testing.T) {
	qa, qb := quota{capacity: 2, rate: 1}, quota{capacity: 4, rate: 2}
	q := quotas{b: [nb]quota{qa, qb}}
	qs := quotas{b: [nb]quota{{capacity: 10}, qb}, slots: 2}
	at := func(ms int64) int64 { return base + ms*1000 + 500 }
	// both classes: a charged ca, b charged cb, at ms
	both := func(ms int64, k kind, ca, cb int64, ta, tb float64) op {
		o := call(ms, k, ca, ta)
		o.AlsoCost, o.AlsoTokens = cb, tb
		if k == admitted {
			o.AlsoStamp = o.Stamp
		}
		return o
	}
	bAlone := func(ms int64, k kind, cost int64, tokens float64) op {
		o := both(ms, k, 0, cost, 0, tokens)
		o.Stamp = 0
		return o
	}
	// class b after a charge of 3 at 0 ms: 1 token, 2 a second
	b3 := bAlone(0, admitted, 3, 1)
	b3.AlsoStamp = at(0)
	slot := func(o op, held int64) op { o.Slot, o.Held = true, held; return o }
	take := func(ms int64, tokens float64, held int64) op { return slot(call(ms, admitted, 1, tokens), held) }
	release := func(ms int64) op { o := call(ms, released, 1, 0); o.Slot = true; return o }
	settle := func(ms int64, k kind, delta, forgiven int64) op {
		o := call(ms, k, 1, 0)
		o.Delta, o.Forgiven = delta, forgiven
		return o
	}
	first := call(0, admitted, 1, 1)
	// with a deny cache whose entries last 100 ms (the check timeout)
	qd := q
	qd.denyAge = 100_000
	// a store denial of 2 at 1 ms, then a refund of 1 returned at 6 ms
	refunded := []op{first, call(1, denied, 2, qa.refill(1, at(0), at(1))), settle(5, settled, -1, 0)}
	then := func(o ...op) []op { return append(append([]op(nil), refunded...), o...) }
	for _, tt := range []struct {
		name string
		q    quotas
		ops  []op
		want porcupine.CheckResult
	}{
		{"both charged, then a denial by class b alone", q, []op{both(0, admitted, 1, 3, 1, 1), bAlone(10, denied, 2, qb.refill(1, at(0), at(10)))}, porcupine.Ok},
		{"both charged, each its cost", q, []op{both(0, admitted, 2, 1, 0, 3), call(10, denied, 1, qa.refill(0, at(0), at(10)))}, porcupine.Ok},
		{"a denial of both when both held their cost", q, []op{both(0, admitted, 1, 3, 1, 1), both(10, denied, 1, 1, qa.refill(1, at(0), at(10)), qb.refill(1, at(0), at(10)))}, porcupine.Illegal},
		{"both charged although b was short", q, []op{b3, both(10, admitted, 1, 2, 1, qb.refill(1, at(0), at(10))-2)}, porcupine.Illegal},
		{"a denial by b, a untouched", q, []op{b3, both(10, denied, 1, 2, 2, qb.refill(1, at(0), at(10))), call(20, admitted, 2, 0)}, porcupine.Ok},
		{"a denial by b that charged a", q, []op{b3, both(10, denied, 1, 2, 2, qb.refill(1, at(0), at(10))), call(20, denied, 2, qa.refill(1, at(10), at(20)))}, porcupine.Illegal},
		{"a lost reply of both, charged once", q, []op{both(0, ambiguous, 1, 3, 0, 0), bAlone(10, denied, 2, qb.refill(1, at(0), at(10)))}, porcupine.Ok},

		{"two slots, a third denied", qs, []op{take(0, 9, 1), take(10, 8, 2), slot(call(20, slotDenied, 1, 8), 2)}, porcupine.Ok},
		{"a third slot taken", qs, []op{take(0, 9, 1), take(10, 8, 2), take(20, 7, 3)}, porcupine.Illegal},
		{"a third slot taken, reported as the second", qs, []op{take(0, 9, 1), take(10, 8, 2), take(20, 7, 2)}, porcupine.Illegal},
		{"a slot released, then taken", qs, []op{take(0, 9, 1), take(10, 8, 2), release(20), take(30, 7, 2)}, porcupine.Ok},
		{"a slot released, still counted", qs, []op{take(0, 9, 1), take(10, 8, 2), release(20), slot(call(30, slotDenied, 1, 8), 2)}, porcupine.Ok},
		{"a slot denial with a slot free", qs, []op{take(0, 9, 1), slot(call(10, slotDenied, 1, 9), 1)}, porcupine.Illegal},
		{"a lost take, then both slots", qs, []op{slot(call(0, ambiguous, 1, 0), 0), take(300, 8, 2), take(310, 7, 2)}, porcupine.Ok},
		{"a lost take counted, then three", qs, []op{slot(call(0, ambiguous, 1, 0), 0), take(300, 8, 2), take(310, 7, 3)}, porcupine.Illegal},

		{"a settle charging 2 more", q, []op{first, settle(5, settled, 2, 0), call(10, denied, 1, qa.refill(-1, at(0), at(10)))}, porcupine.Ok},
		{"a settle charging 2 more, then an admission", q, []op{first, settle(5, settled, 2, 0), call(2500, admitted, 1, qa.refill(-1, at(0), at(2500))-1)}, porcupine.Ok},
		{"a settle's charge ignored", q, []op{first, settle(5, settled, 2, 0), call(1500, admitted, 1, 1)}, porcupine.Illegal},
		{"an admission from the debt a settle left", q, []op{first, settle(5, settled, 2, 0), call(10, admitted, 1, qa.refill(-1, at(0), at(10))-1)}, porcupine.Illegal},
		{"a settle refunding 1", q, []op{first, settle(5, settled, -1, 0), call(10, admitted, 2, 0)}, porcupine.Ok},
		{"a refund above the capacity", q, []op{first, settle(5, settled, -1, 0), call(500, admitted, 2, 0.5)}, porcupine.Illegal},
		{"a settle partly forgiven", q, []op{first, settle(5, settled, 5, 2), call(10, denied, 1, -2+qa.refill(0, at(0), at(10)))}, porcupine.Ok},
		{"a lost settle, charged", q, []op{first, settle(5, settleFailed, 2, 0), call(10, denied, 1, qa.refill(-1, at(0), at(10)))}, porcupine.Ok},
		{"a denial without a deny cache after a refund gave the cost back", q, then(call(10, localDenied, 2, 0)), porcupine.Illegal},
		{"a deny-cache denial within a check timeout of a refund that gave the cost back", qd, then(call(10, localDenied, 2, 0)), porcupine.Ok},
		{"a deny-cache denial within a check timeout of a refund and an admission", qd, then(call(8, admitted, 1, 1), call(10, localDenied, 1, 0)), porcupine.Ok},
		{"a deny-cache denial a check timeout after a refund that gave the cost back", qd, then(call(6+100+2+1, localDenied, 2, 0)), porcupine.Illegal},
		{"a deny-cache denial of more than a refund gave back", qd, then(call(10, localDenied, 1, 0)), porcupine.Illegal},
		{"a deny-cache denial within a check timeout of a lost refund", qd, []op{first, call(1, denied, 2, qa.refill(1, at(0), at(1))), settle(5, settleFailed, -1, 0), call(10, localDenied, 2, 0)}, porcupine.Ok},
		{"a refund clamped at the capacity", q, []op{first, settle(5, settled, -1, 0), call(1500, admitted, 2, 0)}, porcupine.Ok},
		{"a lost settle, not run", q, []op{first, settle(5, settleFailed, 2, 0), call(10, admitted, 1, qa.refill(1, at(0), at(10))-1)}, porcupine.Ok},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := linearizable(tt.q, tt.ops, nil, 10*time.Second, false); got != tt.want {
				t.Fatalf("%s, want %s", got, tt.want)
			}
		})
	}
}
