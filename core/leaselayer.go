package core

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/lease"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// leaseLayer answers a check of a leased class: from this replica's lease
// when it has the tokens, else by taking a new lease from the store (one
// charge of the lease size), else by a plain charge of the request's cost.
// At most one check per bucket set takes a lease at a time; the others wait
// for it once (it is bounded by the check timeout, in the queue and on the
// wire), then spend from it, take its store failure as theirs (one call's
// evidence, not a second timeout each), or make a plain call. Every other
// check passes through to the next layer.
type leaseLayer struct {
	l      *Limiter
	leases *lease.Map
	next   layer
}

func (ll *leaseLayer) decide(ctx context.Context, c checkCall) (Decision, error) {
	req := c.req
	lc, ok := ll.leases.Class(req.Class)
	// (a request with Also, mixed costs included, is never leased)
	if !ok || c.slot != nil || req.Cost <= 0 || len(req.Also) > 0 || c.costs != nil {
		return ll.next.decide(ctx, c)
	}
	l, keys, buckets, sent := ll.l, c.keys, c.buckets, c.sent
	size := lc.Size
	for _, b := range buckets {
		size = min(size, b.Quota.Capacity)
	}
	if req.Cost > size || size <= 1 {
		return ll.next.decide(ctx, c)
	}
	q := func(i int) quota.Quota { return buckets[i].Quota }
	tokens, ok, wait, acquiring := ll.leases.Spend(keys, q, req.Cost, sent, true)
	if ok {
		return leased(buckets, tokens, req.Cost), nil
	}
	if wait != nil {
		select {
		case <-wait.Done():
		case <-ctx.Done():
			return canceled(req, ctx.Err())
		}
		if tokens, ok, _, _ := ll.leases.Spend(keys, q, req.Cost, l.now(), false); ok {
			return leased(buckets, tokens, req.Cost), nil
		}
		var why *transport.ShedError
		switch err := wait.Err(); {
		case errors.As(err, &why):
			return shed(ctx, l.metrics, req, why)
		case err != nil:
			return l.path.breaker.degrade(req, keys, buckets, err), err
		}
		return ll.next.decide(ctx, c)
	}
	if acquiring == nil {
		return ll.next.decide(ctx, c)
	}
	whole := c
	whole.cost = size
	d, err := ll.next.decide(ctx, whole)
	if err != nil || d.Reason != ReasonOK {
		var failure error
		if d.Degraded() || d.Reason == ReasonOverloaded {
			failure = err // the waiters answer alike; a caller gone is not theirs
		}
		ll.leases.Release(acquiring, nil, nil, 0, time.Time{}, failure)
		if err != nil || d.Local {
			// degraded for req (the breaker layer answers by req.Cost), or
			// the deny cache proved the request's own denial
			return d, err
		}
		// the bucket cannot give a whole lease. The reply's balances still
		// prove a denial of the request itself when some bucket holds less
		// than its cost (nothing was charged; the deny cache remembers it):
		// no second call
		if d, ok := denialFor(d, req.Cost); ok {
			return d, nil
		}
		// enough for the request alone: charge it
		return ll.next.decide(ctx, c)
	}
	unspent := size - req.Cost
	quotas := make([]quota.Quota, len(d.Buckets))
	base := make([]float64, len(d.Buckets))
	for i, s := range d.Buckets {
		quotas[i], base[i] = s.Quota, s.Tokens
	}
	// the lease runs from when the check started: never longer than ttl
	ll.leases.Release(acquiring, quotas, base, unspent, sent.Add(lc.TTL), nil)
	states := make([]BucketState, len(d.Buckets))
	for i, s := range d.Buckets {
		s.Tokens += float64(unspent)
		states[i] = s
	}
	return newDecision(states, tightest(states), ReasonOK, 0, req.Cost), nil
}

// leased is a local admission from a lease: tokens holds each bucket's
// balance as the lease states it.
func leased(buckets []quota.Bucket, tokens []float64, cost int64) Decision {
	states := make([]BucketState, len(buckets))
	for i, b := range buckets {
		states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: tokens[i]}
	}
	d := newDecision(states, tightest(states), ReasonOK, 0, cost)
	d.Local = true
	return d
}

// denialFor turns a denial of a lease (a charge larger than cost) into the
// denial of cost, when a bucket's balance is below cost: the decision the
// store would have made for cost, as nothing was charged.
func denialFor(d Decision, cost int64) (Decision, bool) {
	reason, binding, retry := judge(d.Buckets, cost)
	if reason == ReasonOK {
		return Decision{}, false
	}
	return newDecision(d.Buckets, binding, reason, retry, cost), true
}
