package lease

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// store is a layer below that charges what it is asked from a balance,
// and denies (charging nothing) what the balance cannot pay.
type store struct {
	tokens  float64
	charges []int64
}

func (s *store) Decide(_ context.Context, c stack.Call) (stack.Result, error) {
	s.charges = append(s.charges, c.Charge)
	v := stack.OK
	if float64(c.Charge) > s.tokens {
		v = stack.OverLimit
	} else {
		s.tokens -= float64(c.Charge)
	}
	return stack.Result{Verdict: v, Buckets: []stack.Bucket{{Name: c.Buckets[0].Name, Quota: c.Buckets[0].Quota, Tokens: s.tokens}}, Cost: c.Charge}, nil
}

func call(q quota.Quota, sent time.Time) stack.Call {
	return stack.Call{Class: "default", Cost: 1, Charge: 1, Keys: []string{"rl:{a}:default"},
		Buckets: []quota.Bucket{{Name: "default", Quota: q}}, Sent: sent}
}

// The first call of a bucket set is plain (no demand is known); the next,
// without time between, charges the largest lease and states the balance
// with the lease unspent; the next ones spend from the lease without a
// store call. A call of two classes is never leased.
func TestLayerLeases(t *testing.T) {
	q := quota.Quota{Capacity: 100, RefillPerSecond: 1}
	s := &store{tokens: 100}
	now := time.Now()
	l := NewLayer(New(map[string]Class{"default": {Size: 10, TTL: time.Minute}}, 10), func() time.Time { return now }, s)
	c := call(q, now)
	ctx := context.Background()
	r, err := l.Decide(ctx, c)
	if err != nil || r.Verdict != stack.OK || r.Local || r.Buckets[0].Tokens != 99 || !slices.Equal(s.charges, []int64{1}) {
		t.Fatalf("the first call: %+v, err %v, charges %v; want a plain charge of 1", r, err, s.charges)
	}
	r, err = l.Decide(ctx, c)
	if err != nil || r.Verdict != stack.OK || r.Local || r.Cost != 1 || r.Buckets[0].Tokens != 98 || !slices.Equal(s.charges, []int64{1, 10}) {
		t.Fatalf("the lease's call: %+v, err %v, charges %v; want 10 charged, stated as 1 (98 left)", r, err, s.charges)
	}
	r, err = l.Decide(ctx, c)
	if err != nil || r.Verdict != stack.OK || !r.Local || r.Buckets[0].Tokens != 97 || len(s.charges) != 2 {
		t.Fatalf("a call from the lease: %+v, err %v, charges %v; want a local admission at 97", r, err, s.charges)
	}
	two := c
	two.Also = []string{"export"}
	_, _ = l.Decide(ctx, two)
	if len(s.charges) != 3 || s.charges[2] != 1 {
		t.Fatalf("a call of two classes: charges %v; want a plain charge of 1", s.charges)
	}
}

// A lease follows demand: with a TTL of 1 s, at 4 calls a second the leases
// are of 4, at 2 of 2, and none expires unspent; at 1 call a second (a
// lease would serve its own call alone) every call is plain.
func TestLayerSizesByDemand(t *testing.T) {
	q := quota.Quota{Capacity: 1000, RefillPerSecond: 1000}
	for _, tc := range []struct {
		every time.Duration
		want  []int64
	}{
		{250 * time.Millisecond, []int64{1, 4, 4, 4}},
		{500 * time.Millisecond, []int64{1, 2, 2, 2, 2, 2, 2}},
		{time.Second, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		s := &store{tokens: 1000}
		start := time.Now()
		now := start
		l := NewLayer(New(map[string]Class{"default": {Size: 10, TTL: time.Second}}, 10), func() time.Time { return now }, s)
		local := 0
		for i := range 13 {
			now = start.Add(time.Duration(i) * tc.every)
			r, err := l.Decide(context.Background(), call(q, now))
			if err != nil || r.Verdict != stack.OK {
				t.Fatalf("every %v, call %d: %+v %v", tc.every, i, r, err)
			}
			if r.Local {
				local++
			}
		}
		var charged int64
		for _, c := range s.charges {
			charged += c
		}
		if !slices.Equal(s.charges, tc.want) || int(charged) != 13 {
			t.Fatalf("every %v: charges %v (%d tokens for 13 calls, %d local), want %v", tc.every, s.charges, charged, local, tc.want)
		}
	}
}

// Near an empty bucket a lease shrinks to at most half the balance the
// store reported, then to plain calls: a bucket of 20 without refill admits
// exactly 20 calls, the last ones plain, and denies the 21st.
func TestLayerShrinksNearEmpty(t *testing.T) {
	q := quota.Quota{Capacity: 20, RefillPerSecond: 0}
	s := &store{tokens: 20}
	now := time.Now()
	l := NewLayer(New(map[string]Class{"default": {Size: 10, TTL: time.Minute}}, 10), func() time.Time { return now }, s)
	admitted := 0
	for range 25 {
		r, err := l.Decide(context.Background(), call(q, now))
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict == stack.OK {
			admitted++
		}
	}
	if want := []int64{1, 9, 5, 2, 1, 1, 1, 1, 1, 1, 1, 1}; admitted != 20 || !slices.Equal(s.charges[:len(want)], want) {
		t.Fatalf("admitted %d, charges %v; want 20, charges starting %v", admitted, s.charges, want)
	}
}
