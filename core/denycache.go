package core

import (
	"context"
	"sync"
	"time"
)

// denyLayer answers a check from the deny cache when the cache proves its
// denial, and remembers the store's denials on the way back up. Only the
// request's own cost is judged: a lease's larger charge coming back denied
// is remembered as the denial of the request's cost, when it is one.
type denyLayer struct {
	cache   *denyCache
	metrics *metrics
	next    layer
}

func (dl *denyLayer) decide(ctx context.Context, c *checkCall) (Decision, error) {
	if c.req.Cost > 0 {
		if d, ok := dl.cache.check(c.keys, c.buckets, c.req.Cost, c.sent); ok {
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
		dl.cache.remember(c.keys, d, c.sent)
	case c.cost != c.req.Cost:
		if dd, ok := denialFor(d, c.req.Cost); ok {
			dl.cache.remember(c.keys, dd, c.sent)
		}
	}
	return d, err
}

// denyCache remembers, after a denial, an upper bound on each bucket's
// tokens: the balance the store reported plus the refill since the request
// was sent (other replicas can only lower it). While that bound is below a
// request's cost, the store would deny it too, so the request is denied
// locally, without a round trip. It never denies a request the store would
// admit.
type denyCache struct {
	mu      sync.RWMutex
	entries map[string]denyEntry // by the first bucket key
	max     int
}

type denyEntry struct {
	keys   []string
	states []BucketState
	since  time.Time // when the denied request was sent
}

func newDenyCache(max int) *denyCache {
	return &denyCache{entries: map[string]denyEntry{}, max: max}
}

// check returns a local denial when the cache proves one.
func (dc *denyCache) check(keys []string, buckets []Bucket, cost int64, now time.Time) (Decision, bool) {
	dc.mu.RLock()
	e, ok := dc.entries[keys[0]]
	dc.mu.RUnlock()
	if !ok || len(e.keys) != len(keys) {
		return Decision{}, false
	}
	if now.Before(e.since) {
		// the clock stepped back (client-clock mode): the store keeps the
		// later stamp and refills nothing, so another replica's refill since
		// may already have been admitted from; the bound proves nothing
		dc.drop(keys[0], e.since)
		return Decision{}, false
	}
	elapsed := now.Sub(e.since).Seconds()
	states := make([]BucketState, len(keys))
	for i := range keys {
		if e.keys[i] != keys[i] || e.states[i].Quota != buckets[i].Quota {
			return Decision{}, false // another set of buckets, or a changed quota
		}
		q := buckets[i].Quota
		states[i] = BucketState{Name: buckets[i].Name, Quota: q, Tokens: refill(q, e.states[i].Tokens, elapsed)}
	}
	reason, binding, retry := judge(states, cost)
	if reason == ReasonOK {
		dc.drop(keys[0], e.since) // the bound no longer proves anything
		return Decision{}, false
	}
	return newDecision(states, binding, reason, retry, cost), true
}

// drop deletes the entry of key remembered at since, unless a newer one
// replaced it.
func (dc *denyCache) drop(key string, since time.Time) {
	dc.mu.Lock()
	if cur, ok := dc.entries[key]; ok && cur.since.Equal(since) {
		delete(dc.entries, key)
	}
	dc.mu.Unlock()
}

func (dc *denyCache) remember(keys []string, d Decision, sent time.Time) {
	dc.mu.Lock()
	if len(dc.entries) >= dc.max {
		clear(dc.entries)
	}
	dc.entries[keys[0]] = denyEntry{keys: keys, states: d.Buckets, since: sent}
	dc.mu.Unlock()
}

func (dc *denyCache) forget(prefix string) {
	dc.mu.Lock()
	for k := range dc.entries {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(dc.entries, k)
		}
	}
	dc.mu.Unlock()
}
