package denycache

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// store is a layer below that answers every call with r, counting them.
type store struct {
	r     stack.Result
	calls int
}

func (s *store) Decide(context.Context, stack.Call) (stack.Result, error) {
	s.calls++
	return s.r, nil
}

// A denial coming back up is remembered; the next call it proves denied is
// answered locally (counted as a hit) with the balance refilled since, and
// one it no longer proves goes down again. A call of mixed costs is never
// answered from the cache.
func TestLayerRemembersAndProves(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 1}
	b := []quota.Bucket{{Name: "default", Quota: q}}
	s := &store{r: stack.Result{Verdict: stack.OverLimit, Buckets: []stack.Bucket{{Name: "default", Quota: q, Tokens: 0.5}}, Cost: 2}}
	hits := 0
	l := NewLayer(New(10, time.Minute), func(context.Context) { hits++ }, s)
	sent := time.Now()
	c := stack.Call{Cost: 2, Charge: 2, Keys: []string{"rl:{a}:default"}, Buckets: b, Sent: sent}
	ctx := context.Background()
	if _, err := l.Decide(ctx, c); err != nil || s.calls != 1 {
		t.Fatalf("first call: %d store calls, err %v", s.calls, err)
	}
	c.Sent = sent.Add(time.Second) // 1.5 tokens: still short of 2
	r, err := l.Decide(ctx, c)
	if err != nil || s.calls != 1 || hits != 1 || !r.Local || r.Verdict != stack.OverLimit || r.Buckets[0].Tokens != 1.5 || r.Retry != 500*time.Millisecond {
		t.Fatalf("proved denial: %+v, err %v, %d store calls, %d hits; want a local denial at 1.5 tokens, retry 0.5 s", r, err, s.calls, hits)
	}
	mixed := c
	mixed.Costs = []int64{2}
	_, _ = l.Decide(ctx, mixed)
	if s.calls != 2 {
		t.Fatalf("a mixed-cost call was answered from the cache")
	}
	c.Sent = sent.Add(2 * time.Second) // 2.5 tokens: proves nothing
	_, _ = l.Decide(ctx, c)
	if s.calls != 3 || hits != 1 {
		t.Fatalf("a call the bound no longer proves denied: %d store calls, %d hits; want it sent", s.calls, hits)
	}
}
