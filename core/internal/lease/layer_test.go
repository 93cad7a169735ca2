package lease

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// store is a layer below that charges what it is asked from a balance.
type store struct {
	tokens  float64
	charges []int64
}

func (s *store) Decide(_ context.Context, c stack.Call) (stack.Result, error) {
	s.charges = append(s.charges, c.Charge)
	s.tokens -= float64(c.Charge)
	return stack.Result{Verdict: stack.OK, Buckets: []stack.Bucket{{Name: c.Buckets[0].Name, Quota: c.Buckets[0].Quota, Tokens: s.tokens}}, Cost: c.Charge}, nil
}

// The first call of a leased class charges the lease's size and states
// the balance with the lease unspent; the next ones spend from the lease
// without a store call. A call of two classes is never leased.
func TestLayerLeases(t *testing.T) {
	q := quota.Quota{Capacity: 100, RefillPerSecond: 1}
	s := &store{tokens: 100}
	l := NewLayer(New(map[string]Class{"default": {Size: 10, TTL: time.Minute}}, 10), time.Now, s)
	c := stack.Call{Class: "default", Cost: 1, Charge: 1, Keys: []string{"rl:{a}:default"},
		Buckets: []quota.Bucket{{Name: "default", Quota: q}}, Sent: time.Now()}
	ctx := context.Background()
	r, err := l.Decide(ctx, c)
	if err != nil || r.Verdict != stack.OK || r.Local || r.Cost != 1 || r.Buckets[0].Tokens != 99 || len(s.charges) != 1 || s.charges[0] != 10 {
		t.Fatalf("the lease's call: %+v, err %v, charges %v; want 10 charged, stated as 1 (99 left)", r, err, s.charges)
	}
	r, err = l.Decide(ctx, c)
	if err != nil || r.Verdict != stack.OK || !r.Local || r.Buckets[0].Tokens != 98 || len(s.charges) != 1 {
		t.Fatalf("a call from the lease: %+v, err %v, charges %v; want a local admission at 98", r, err, s.charges)
	}
	two := c
	two.Also = []string{"export"}
	_, _ = l.Decide(ctx, two)
	if len(s.charges) != 2 || s.charges[1] != 1 {
		t.Fatalf("a call of two classes: charges %v; want a plain charge of 1", s.charges)
	}
}
