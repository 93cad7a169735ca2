// Package denycache is the deny cache of the check path: after a denial it
// remembers an upper bound on each bucket's tokens, the balance the store
// reported plus the refill since the request was sent. While that bound is
// below a request's cost, and for at most maxAge after the denied request
// was sent, the request is denied locally, without a round trip.
//
// Other replicas' charges can only lower the balance; their refunds
// (Limiter.Settle) and Resets raise it unseen, so the bound holds only
// until a refund elsewhere: maxAge is how long the cache may keep denying
// what such a refund gave back. Whatever the bound, a check sent maxAge or
// more after the denial it would be answered from asks the store.
package denycache

import (
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Cache is the deny cache, bounded to max entries, one per bucket set.
type Cache struct {
	mu      sync.RWMutex
	entries map[string]entry // by the first bucket key
	max     int
	maxAge  time.Duration
}

type entry struct {
	keys   []string
	quotas []quota.Quota
	tokens []float64
	since  time.Time // when the denied request was sent
}

// New returns an empty cache of at most max entries, each trusted for less
// than maxAge after its denied request was sent.
func New(max int, maxAge time.Duration) *Cache {
	return &Cache{entries: map[string]entry{}, max: max, maxAge: maxAge}
}

// Check reports whether the cache proves that charging cost to the buckets
// of keys (quotaOf(i) is bucket i's quota now) would be denied, and if so
// returns each bucket's bound, refilled to now.
func (c *Cache) Check(keys []string, quotaOf func(i int) quota.Quota, cost int64, now time.Time) ([]float64, bool) {
	c.mu.RLock()
	e, ok := c.entries[keys[0]]
	c.mu.RUnlock()
	if !ok || len(e.keys) != len(keys) {
		return nil, false
	}
	if now.Before(e.since) || now.Sub(e.since) >= c.maxAge {
		// the clock stepped back (client-clock mode): the store keeps the
		// later stamp and refills nothing, so another replica's refill since
		// may already have been admitted from; the bound proves nothing.
		// Or the entry is maxAge old: another replica's refund may have
		// raised the balance above the bound; the store knows
		c.drop(keys[0], e.since)
		return nil, false
	}
	elapsed := now.Sub(e.since).Seconds()
	tokens := make([]float64, len(keys))
	denied := false
	for i := range keys {
		q := quotaOf(i)
		if e.keys[i] != keys[i] || e.quotas[i] != q {
			return nil, false // another set of buckets, or a changed quota
		}
		tokens[i] = bucketmath.Refill(q.Capacity, q.RefillPerSecond, e.tokens[i], elapsed)
		denied = denied || cost > q.Capacity || tokens[i] < float64(cost)
	}
	if !denied {
		c.drop(keys[0], e.since) // the bound no longer proves anything
		return nil, false
	}
	return tokens, true
}

// drop deletes the entry of key remembered at since, unless a newer one
// replaced it.
func (c *Cache) drop(key string, since time.Time) {
	c.mu.Lock()
	if cur, ok := c.entries[key]; ok && cur.since.Equal(since) {
		delete(c.entries, key)
	}
	c.mu.Unlock()
}

// Remember keeps the balances of a denial of a request sent at sent: the
// buckets of keys, with quotas and tokens. At the bound the cache starts
// over.
func (c *Cache) Remember(keys []string, quotas []quota.Quota, tokens []float64, sent time.Time) {
	c.mu.Lock()
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[keys[0]] = entry{keys: keys, quotas: quotas, tokens: tokens, since: sent}
	c.mu.Unlock()
}

// Forget drops the entries whose first key begins with prefix (a tenant's
// Reset).
func (c *Cache) Forget(prefix string) {
	c.mu.Lock()
	for k := range c.entries {
		if strings.HasPrefix(k, prefix) {
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
}

// Delete drops the entry whose first key is key (a refund: the bound it
// remembered no longer holds).
func (c *Cache) Delete(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}
