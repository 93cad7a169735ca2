package denycache

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Layer answers a call from the cache when the cache proves its denial,
// and remembers the denials coming back up. Only the request's own cost is
// judged: a lease's larger charge coming back denied is remembered as the
// denial of the request's cost, when it is one.
type Layer struct {
	cache *Cache
	hit   func(ctx context.Context) // counts a call the cache answered
	next  stack.Layer
}

// NewLayer returns the deny cache's layer over cache, above next; hit
// counts the calls it answers.
func NewLayer(cache *Cache, hit func(ctx context.Context), next stack.Layer) *Layer {
	return &Layer{cache: cache, hit: hit, next: next}
}

// Decide answers c from the cache, or hands it on and remembers its
// denial.
func (l *Layer) Decide(ctx context.Context, c stack.Call) (stack.Result, error) {
	if c.Costs != nil || c.Failure != nil {
		// mixed costs: the cache proves and remembers denials of one cost;
		// a shared failure is answered below, as its acquirer's was
		return l.next.Decide(ctx, c)
	}
	if c.Cost > 0 {
		quotaOf := func(i int) quota.Quota { return c.Buckets[i].Quota }
		if tokens, ok := l.cache.Check(c.Keys, quotaOf, c.Cost, c.Sent); ok {
			states := stack.Balances(c.Buckets, tokens)
			r, _ := Denial(states, c.Cost)
			r.Local = true
			l.hit(ctx)
			return r, nil
		}
	}
	r, err := l.next.Decide(ctx, c)
	if err != nil || r.Verdict == stack.OK || r.Local {
		return r, err
	}
	switch {
	case c.Charge == c.Cost && r.Verdict == stack.OverLimit:
		l.remember(c.Keys, r.Buckets, c.Sent)
	case c.Charge != c.Cost:
		if d, ok := Denial(r.Buckets, c.Cost); ok {
			l.remember(c.Keys, d.Buckets, c.Sent)
		}
	}
	return r, err
}

func (l *Layer) remember(keys []string, states []stack.Bucket, sent time.Time) {
	quotas := make([]quota.Quota, len(states))
	tokens := make([]float64, len(states))
	for i, s := range states {
		quotas[i], tokens[i] = s.Quota, s.Tokens
	}
	l.cache.Remember(keys, quotas, tokens, sent)
}

// Denial is the script's verdict on charging cost to buckets of the given
// balances (refilled to now), stated as a result: a denial charges
// nothing, and names its binding bucket and retry. ok reports a denial:
// false when every bucket holds cost.
func Denial(states []stack.Bucket, cost int64) (r stack.Result, ok bool) {
	v, binding, retry := bucketmath.Judge(len(states), stack.States(states), cost)
	r = stack.Result{Verdict: stack.Verdict(v), Buckets: states, Binding: binding, Cost: cost}
	if v == bucketmath.OverLimit {
		r.Retry = bucketmath.Duration(retry)
	}
	return r, v != bucketmath.OK
}
