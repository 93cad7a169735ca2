// Package fallback is the local fallback of the check path
// (WithLocalFallback): while a tenant's store shard fails, its checks are
// answered from an in-process token bucket per key holding a share of the
// quota (the replica's share of the fleet). Only the tenant's own
// successful store call resets its buckets: another tenant's success
// during a partial outage says nothing about this one's shard. Its
// arithmetic is the script's (internal/bucketmath).
package fallback

import (
	"math"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Buckets is the fallback's state: a local bucket per key, at most max.
type Buckets struct {
	share   float64
	mu      sync.Mutex
	buckets map[string]*bucket
	max     int
}

type bucket struct {
	quota  quota.Quota // the local share: rate part only
	tokens float64
	last   time.Time
}

// New returns the fallback for a replica holding share (0 < share <= 1)
// of each quota, keeping at most max buckets.
func New(share float64, max int) *Buckets {
	return &Buckets{share: share, buckets: map[string]*bucket{}, max: max}
}

// Answer is the fallback's decision on one check, stated in the real
// quotas: Verdict (bucketmath's OK, OverLimit, CostExceedsCapacity), the
// binding bucket, the retry time of a denial in seconds, and each bucket's
// balance, the local one scaled back by 1/share (this replica's estimate
// of the whole).
type Answer struct {
	Verdict uint8
	Binding int
	Retry   float64
	Tokens  []float64
}

// Take is the fallback's decision on charging cost to the buckets of keys
// (buckets[i].Quota is bucket i's real quota): each holds share of its quota in
// process (capacity at least 1), checked and charged all or nothing. The
// answer is "never" (CostExceedsCapacity) only when the cost is above a
// real capacity; a cost above the shrunken capacity alone is an over-limit
// denial whose retry is the time the real bucket takes to earn the cost
// (the store is expected back by then).
func (fb *Buckets) Take(keys []string, buckets []quota.Bucket, cost int64, now time.Time) Answer {
	local := make([]quota.Quota, len(buckets))
	for i, b := range buckets {
		q := b.Quota
		local[i] = quota.Quota{Capacity: max(1, int64(float64(q.Capacity)*fb.share)), RefillPerSecond: q.RefillPerSecond * fb.share}
	}
	verdict, binding, retry, tokens := fb.take(keys, local, cost, now)
	for i, b := range buckets {
		tokens[i] = math.Min(float64(b.Quota.Capacity), tokens[i]/fb.share)
	}
	for i, b := range buckets {
		if cost > b.Quota.Capacity {
			return Answer{Verdict: bucketmath.CostExceedsCapacity, Binding: i, Tokens: tokens}
		}
	}
	switch verdict {
	case bucketmath.CostExceedsCapacity: // above the share only
		retry = 0
		for i, b := range buckets {
			if cost > local[i].Capacity {
				if w := bucketmath.WaitFor(b.Quota.RefillPerSecond, 0, cost); w > retry {
					binding, retry = i, w
				}
			}
		}
		return Answer{Verdict: bucketmath.OverLimit, Binding: binding, Retry: retry, Tokens: tokens}
	case bucketmath.OverLimit:
		// the retry as the local decision stated it: whole nanoseconds
		retry = time.Duration(math.Ceil(retry * 1e9)).Seconds()
		return Answer{Verdict: bucketmath.OverLimit, Binding: binding, Retry: retry, Tokens: tokens}
	}
	return Answer{Verdict: verdict, Binding: binding, Tokens: tokens}
}

// take checks and charges cost against every (key, quota) pair, all or
// nothing, and returns the script's verdict and the balances after it.
func (fb *Buckets) take(keys []string, quotas []quota.Quota, cost int64, now time.Time) (verdict uint8, binding int, retry float64, tokens []float64) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.buckets) >= fb.max {
		fb.evict(now)
	}
	bs := make([]*bucket, len(quotas))
	tokens = make([]float64, len(quotas))
	for i, q := range quotas {
		b, ok := fb.buckets[keys[i]]
		if !ok || b.quota != q {
			t := float64(q.Capacity)
			if ok {
				t = math.Min(b.tokens, t)
			}
			b = &bucket{quota: q, tokens: t, last: now}
			fb.buckets[keys[i]] = b
		}
		if el := now.Sub(b.last).Seconds(); el > 0 {
			b.tokens = bucketmath.Refill(q.Capacity, q.RefillPerSecond, b.tokens, el)
			b.last = now
		}
		bs[i] = b
		tokens[i] = b.tokens
	}
	at := func(i int) (int64, float64, float64) { return quotas[i].Capacity, quotas[i].RefillPerSecond, tokens[i] }
	verdict, binding, retry = bucketmath.Judge(len(quotas), at, cost)
	if verdict == bucketmath.OK {
		for i, b := range bs {
			b.tokens -= float64(cost)
			tokens[i] = b.tokens
		}
		binding = bucketmath.Tightest(len(quotas), at)
	}
	return verdict, binding, retry, tokens
}

// evict makes room in a full map: it drops the buckets that have refilled
// to capacity (a full bucket dropped is the same as a new one), then, if
// that freed less than a sixteenth of the map, arbitrary ones: past max
// tenants in one outage, some restart full. Callers hold mu.
func (fb *Buckets) evict(now time.Time) {
	for k, b := range fb.buckets {
		if bucketmath.Refill(b.quota.Capacity, b.quota.RefillPerSecond, b.tokens, now.Sub(b.last).Seconds()) >= float64(b.quota.Capacity) {
			delete(fb.buckets, k)
		}
	}
	for k := range fb.buckets {
		if len(fb.buckets) <= fb.max-fb.max/16-1 {
			break
		}
		delete(fb.buckets, k)
	}
}

// Forget drops the local buckets of keys: their tenant's store call
// succeeded, so the store holds their state again.
func (fb *Buckets) Forget(keys []string) {
	fb.mu.Lock()
	if len(fb.buckets) > 0 {
		for _, k := range keys {
			delete(fb.buckets, k)
		}
	}
	fb.mu.Unlock()
}
