package core

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/denycache"
	"github.com/tollgate-go/tollgate/core/quota"
)

// denyLayer answers a check from the deny cache (WithDenyCache) when the
// cache proves its denial, and remembers the store's denials on the way
// back up. Only the request's own cost is judged: a lease's larger charge
// coming back denied is remembered as the denial of the request's cost,
// when it is one.
type denyLayer struct {
	cache   *denycache.Cache
	metrics *metrics
	next    layer
}

func (dl *denyLayer) decide(ctx context.Context, c checkCall) (Decision, error) {
	if c.costs != nil {
		// mixed costs: the cache proves and remembers denials of one cost
		return dl.next.decide(ctx, c)
	}
	if c.req.Cost > 0 {
		quotaOf := func(i int) quota.Quota { return c.buckets[i].Quota }
		if tokens, ok := dl.cache.Check(c.keys, quotaOf, c.req.Cost, c.sent); ok {
			states := make([]BucketState, len(c.buckets))
			for i, b := range c.buckets {
				states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: tokens[i]}
			}
			reason, binding, retry := judge(states, c.req.Cost)
			d := newDecision(states, binding, reason, retry, c.req.Cost)
			d.Local = true
			dl.metrics.denyCacheHits.Add(ctx, 1)
			return d, nil
		}
	}
	d, err := dl.next.decide(ctx, c)
	if err != nil || d.Reason == ReasonOK || d.Local {
		return d, err
	}
	switch {
	case c.cost == c.req.Cost && d.Reason == ReasonOverLimit:
		dl.remember(c.keys, d, c.sent)
	case c.cost != c.req.Cost:
		if dd, ok := denialFor(d, c.req.Cost); ok {
			dl.remember(c.keys, dd, c.sent)
		}
	}
	return d, err
}

func (dl *denyLayer) remember(keys []string, d Decision, sent time.Time) {
	quotas := make([]quota.Quota, len(d.Buckets))
	tokens := make([]float64, len(d.Buckets))
	for i, s := range d.Buckets {
		quotas[i], tokens[i] = s.Quota, s.Tokens
	}
	dl.cache.Remember(keys, quotas, tokens, sent)
}
