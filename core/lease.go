package core

import (
	"github.com/tollgate-go/tollgate/core/internal/transport"

	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// leaseClass is one class's lease setting (WithLeases).
type leaseClass struct {
	size int64
	ttl  time.Duration
}

// leases holds this replica's token leases, one per bucket set (tenant and
// class), each taken from the store as one charge of the lease's size.
//
// The map is bounded (max). At the bound it drops leases that have expired
// (their unspent tokens are lost by design then); it never drops a live
// lease, whose unspent tokens its tenant has paid for. When every entry is
// live, a check that finds no lease of its own is a plain check: it takes
// no lease until one expires.
type leases struct {
	classes map[string]leaseClass
	mu      sync.Mutex
	entries map[string]*lease // by the first bucket key
	max     int
	// noneBefore: no lease in the map expires before it (a sweep found
	// none); until then a full map is not swept again
	noneBefore time.Time
}

type lease struct {
	keys    []string
	base    []BucketState // the store's balances after the lease was charged
	tokens  int64         // unspent
	expires time.Time
	// acquiring is non-nil while one check takes a new lease from the store;
	// it is done when that check is.
	acquiring *acquisition
}

// acquisition is one check taking a lease; the checks that wait for it
// learn its store failure, if any, with it.
type acquisition struct {
	done chan struct{}
	err  error // set before done is closed: the acquirer's store failure
}

func newLeases(classes map[string]leaseClass, max int) *leases {
	return &leases{classes: classes, entries: map[string]*lease{}, max: max}
}

// spend takes cost tokens from a live lease for keys. Otherwise, when no
// check is taking a lease for keys, it marks the caller as the one who does
// (acquire true: the caller must call release with the returned lease);
// when another check is taking one, it returns that acquisition to wait
// on. With neither (acquire false, or a full map of live leases) the caller
// makes a plain check.
func (ls *leases) spend(keys []string, buckets []Bucket, cost int64, now time.Time, acquire bool) (d Decision, ok bool, wait *acquisition, acquiring *lease) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e := ls.entries[keys[0]]
	if e != nil && !e.matches(keys, buckets) {
		// another bucket set or a changed quota: the lease proves nothing
		if e.acquiring != nil {
			return Decision{}, false, e.acquiring, nil
		}
		delete(ls.entries, keys[0])
		e = nil
	}
	if e != nil && e.base != nil && e.tokens >= cost && now.Before(e.expires) {
		e.tokens -= cost
		return e.decision(buckets, cost), true, nil, nil
	}
	if e != nil && e.acquiring != nil {
		return Decision{}, false, e.acquiring, nil
	}
	if !acquire {
		return Decision{}, false, nil, nil
	}
	if e == nil {
		if len(ls.entries) >= ls.max && !ls.sweep(now) {
			return Decision{}, false, nil, nil // every lease is live: none is burned
		}
		e = &lease{keys: keys}
		ls.entries[keys[0]] = e
	}
	e.acquiring = &acquisition{done: make(chan struct{})}
	return Decision{}, false, nil, e
}

// sweep drops the expired leases of a full map and reports whether it made
// room. A sweep that finds none remembers the earliest expiry, so a full
// map of live leases is not swept on every check. Callers hold mu.
func (ls *leases) sweep(now time.Time) bool {
	if now.Before(ls.noneBefore) {
		return false
	}
	var earliest time.Time
	for k, e := range ls.entries {
		switch {
		case e.acquiring != nil:
			continue
		case !now.Before(e.expires):
			delete(ls.entries, k)
		case earliest.IsZero() || e.expires.Before(earliest):
			earliest = e.expires
		}
	}
	if len(ls.entries) < ls.max {
		return true
	}
	if earliest.IsZero() {
		earliest = now.Add(time.Millisecond) // only acquisitions: they end soon
	}
	ls.noneBefore = earliest
	return false
}

// release ends the acquisition of e (from spend): its waiters are released
// whatever happened to the map meanwhile (a Reset), and learn failure, the
// acquirer's store failure if any. With a granted decision d (charged size
// tokens, of which cost were the caller's), the lease holds size-cost
// tokens until expires, if it is still the map's; otherwise it is dropped.
func (ls *leases) release(e *lease, d *Decision, unspent int64, expires time.Time, failure error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if a := e.acquiring; a != nil {
		a.err = failure
		close(a.done)
		e.acquiring = nil
	}
	current := ls.entries[e.keys[0]] == e
	if d == nil {
		if current {
			delete(ls.entries, e.keys[0])
		}
		return
	}
	if current {
		e.base, e.tokens, e.expires = d.Buckets, unspent, expires
		if expires.Before(ls.noneBefore) {
			ls.noneBefore = expires
		}
	}
}

func (e *lease) matches(keys []string, buckets []Bucket) bool {
	if len(e.keys) != len(keys) || (e.base != nil && len(e.base) != len(buckets)) {
		return false
	}
	for i := range keys {
		if e.keys[i] != keys[i] || (e.base != nil && e.base[i].Quota != buckets[i].Quota) {
			return false
		}
	}
	return true
}

// decision is a local admission from the lease: each bucket's balance is
// the store's after the lease plus the lease's unspent tokens.
func (e *lease) decision(buckets []Bucket, cost int64) Decision {
	states := make([]BucketState, len(buckets))
	for i, b := range buckets {
		states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: e.base[i].Tokens + float64(e.tokens)}
	}
	d := newDecision(states, tightest(states), ReasonOK, 0, cost)
	d.Local = true
	return d
}

func (ls *leases) forget(prefix string) {
	ls.mu.Lock()
	for k, e := range ls.entries {
		if strings.HasPrefix(k, prefix) && e.acquiring == nil {
			delete(ls.entries, k)
		}
	}
	ls.mu.Unlock()
}

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
	leases *leases
	next   layer
}

func (ll *leaseLayer) decide(ctx context.Context, c *checkCall) (Decision, error) {
	req := c.req
	lc, ok := ll.leases.classes[req.Class]
	if !ok || c.slot != nil || req.Cost <= 0 || len(req.Also) > 0 {
		return ll.next.decide(ctx, c)
	}
	l, keys, buckets, sent := ll.l, c.keys, c.buckets, c.sent
	size := lc.size
	for _, b := range buckets {
		size = min(size, b.Quota.Capacity)
	}
	if req.Cost > size || size <= 1 {
		return ll.next.decide(ctx, c)
	}
	d, ok, wait, acquiring := ll.leases.spend(keys, buckets, req.Cost, sent, true)
	if ok {
		return d, nil
	}
	if wait != nil {
		select {
		case <-wait.done:
		case <-ctx.Done():
			return l.callerGone(req, ctx.Err())
		}
		if d, ok, _, _ := ll.leases.spend(keys, buckets, req.Cost, l.now(), false); ok {
			return d, nil
		}
		var shed *transport.ShedError
		switch {
		case errors.As(wait.err, &shed):
			return l.shed(ctx, req, shed)
		case wait.err != nil:
			return l.degrade(req, keys, buckets, wait.err), wait.err
		}
		return ll.next.decide(ctx, c)
	}
	if acquiring == nil {
		return ll.next.decide(ctx, c)
	}
	lease := *c
	lease.cost = size
	d, err := ll.next.decide(ctx, &lease)
	if err != nil || d.Reason != ReasonOK {
		var failure error
		if d.Degraded() || d.Reason == ReasonOverloaded {
			failure = err // the waiters answer alike; a caller gone is not theirs
		}
		ll.leases.release(acquiring, nil, 0, time.Time{}, failure)
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
	// the lease runs from when the check started: never longer than ttl
	ll.leases.release(acquiring, &d, unspent, sent.Add(lc.ttl), nil)
	states := make([]BucketState, len(d.Buckets))
	for i, s := range d.Buckets {
		s.Tokens += float64(unspent)
		states[i] = s
	}
	return newDecision(states, tightest(states), ReasonOK, 0, req.Cost), nil
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
