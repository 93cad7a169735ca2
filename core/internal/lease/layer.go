package lease

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/internal/denycache"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Layer answers a call of a leased class: from this replica's lease when
// it has the tokens, else by taking a new lease from the store (one charge
// of the lease's size, sized by the map from demand and the bucket's
// level), else by a plain charge of the request's cost, whose reply's
// balances the map remembers. At
// most one call per bucket set takes a lease at a time; the others wait
// for it once (it is bounded by the check timeout, in the queue and on the
// wire), then spend from it, share its store failure (one call's evidence,
// not a second timeout each: the call goes down with the failure, and the
// guard answers it), or make a plain call. Every other call passes
// through.
type Layer struct {
	leases *Map
	now    func() time.Time // the limiter's clock
	next   stack.Layer
}

// NewLayer returns the leases' layer over m, above next, on the clock now.
func NewLayer(m *Map, now func() time.Time, next stack.Layer) *Layer {
	return &Layer{leases: m, now: now, next: next}
}

// Decide answers c from a lease, or takes one, or hands c on.
func (l *Layer) Decide(ctx context.Context, c stack.Call) (stack.Result, error) {
	lc, ok := l.leases.Class(c.Class)
	// (a call with Also, mixed costs included, is never leased)
	if !ok || c.Slot.Key != "" || c.Cost <= 0 || len(c.Also) > 0 || c.Costs != nil {
		return l.next.Decide(ctx, c)
	}
	size := lc.Size
	for _, b := range c.Buckets {
		size = min(size, b.Quota.Capacity)
	}
	if c.Cost > size || size <= 1 {
		return l.next.Decide(ctx, c)
	}
	q := func(i int) quota.Quota { return c.Buckets[i].Quota }
	tokens, ok, wait, acquiring, size := l.leases.Spend(c.Keys, q, c.Cost, c.Sent, Class{Size: size, TTL: lc.TTL})
	if ok {
		return leased(c.Buckets, tokens, c.Cost), nil
	}
	if wait != nil {
		select {
		case <-wait.Done():
		case <-ctx.Done():
			return stack.Result{Verdict: stack.Canceled, Cost: c.Cost}, &transport.CallerGone{Err: ctx.Err()}
		}
		if tokens, ok, _, _, _ := l.leases.Spend(c.Keys, q, c.Cost, l.now(), Class{}); ok {
			return leased(c.Buckets, tokens, c.Cost), nil
		}
		c.Failure = wait.Err() // nil: a plain call
		return l.plain(ctx, c)
	}
	if acquiring == nil {
		return l.plain(ctx, c)
	}
	whole := c
	whole.Charge = size
	r, err := l.next.Decide(ctx, whole)
	if err != nil || r.Verdict != stack.OK {
		var failure error
		if r.Degraded() || r.Verdict == stack.Overloaded {
			failure = err // the waiters answer alike; a caller gone is not theirs
		}
		l.leases.Release(acquiring, nil, nil, 0, time.Time{}, time.Time{}, failure)
		if err != nil || r.Local {
			// degraded for the request (the guard answers by its cost), or
			// the deny cache proved the request's own denial
			return r, err
		}
		// the bucket cannot give a whole lease. The reply's balances still
		// prove a denial of the request itself when some bucket holds less
		// than its cost (nothing was charged; the deny cache remembers it):
		// no second call
		l.observe(c, r)
		if d, ok := denycache.Denial(r.Buckets, c.Cost); ok {
			return d, nil
		}
		// enough for the request alone: charge it
		return l.plain(ctx, c)
	}
	unspent := size - c.Cost
	quotas := make([]quota.Quota, len(r.Buckets))
	base := make([]float64, len(r.Buckets))
	for i, s := range r.Buckets {
		quotas[i], base[i] = s.Quota, s.Tokens
	}
	// the lease runs from when the check started: never longer than ttl
	l.leases.Release(acquiring, quotas, base, unspent, l.now(), c.Sent.Add(lc.TTL), nil)
	// the answer states the balances with the lease unspent (the store's
	// reply is this call's alone: stated in place)
	for i := range r.Buckets {
		r.Buckets[i].Tokens += float64(unspent)
	}
	return stack.Result{Verdict: stack.OK, Buckets: r.Buckets, Binding: tightest(r.Buckets), Cost: c.Cost}, nil
}

// plain hands c on, and has the map remember the balances the store
// reported.
func (l *Layer) plain(ctx context.Context, c stack.Call) (stack.Result, error) {
	r, err := l.next.Decide(ctx, c)
	if err == nil {
		l.observe(c, r)
	}
	return r, err
}

// observe has the map remember r's balances, when the store reported them.
func (l *Layer) observe(c stack.Call, r stack.Result) {
	if r.Local || r.Degraded() || (r.Verdict != stack.OK && r.Verdict != stack.OverLimit) {
		return
	}
	// the store's balances are of a moment before the reply: stating them
	// at the reply's arrival undercounts their refill since, never more
	l.leases.Observe(c.Keys, r.Buckets, l.now())
}

// leased is a local admission from a lease: tokens holds each bucket's
// balance as the lease states it.
func leased(buckets []quota.Bucket, tokens []float64, cost int64) stack.Result {
	states := stack.Balances(buckets, tokens)
	return stack.Result{Verdict: stack.OK, Buckets: states, Binding: tightest(states), Cost: cost, Local: true}
}

// tightest is the binding bucket of an admission.
func tightest(states []stack.Bucket) int {
	return bucketmath.Tightest(len(states), stack.States(states))
}
