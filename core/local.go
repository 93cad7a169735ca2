package core

import (
	"math"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// localBuckets is an in-process token bucket per key, used as the fallback
// while the store fails (WithLocalFallback) and as the deny cache
// (WithDenyCache). Its arithmetic is the script's.
type localBuckets struct {
	mu      sync.Mutex
	buckets map[string]*localBucket
	max     int
}

type localBucket struct {
	quota  quota.Quota
	tokens float64
	last   time.Time
}

func newLocalBuckets(max int) *localBuckets {
	return &localBuckets{buckets: map[string]*localBucket{}, max: max}
}

// take checks and charges cost against every (key, quota) pair, all or
// nothing, and returns the decision the script would have made.
func (lb *localBuckets) take(keys []string, buckets []quota.Bucket, cost int64, now time.Time) Decision {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if len(lb.buckets) >= lb.max {
		lb.evict(now)
	}
	states := make([]BucketState, len(buckets))
	bs := make([]*localBucket, len(buckets))
	for i, b := range buckets {
		lbk, ok := lb.buckets[keys[i]]
		if !ok || lbk.quota != b.Quota {
			tokens := float64(b.Quota.Capacity)
			if ok {
				tokens = math.Min(lbk.tokens, tokens)
			}
			lbk = &localBucket{quota: b.Quota, tokens: tokens, last: now}
			lb.buckets[keys[i]] = lbk
		}
		if el := now.Sub(lbk.last).Seconds(); el > 0 {
			lbk.tokens = refill(b.Quota, lbk.tokens, el)
			lbk.last = now
		}
		bs[i] = lbk
		states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: lbk.tokens}
	}
	reason, binding, retry := judge(states, cost)
	if reason == ReasonOK {
		for i, lbk := range bs {
			lbk.tokens -= float64(cost)
			states[i].Tokens = lbk.tokens
		}
		binding = tightest(states)
	}
	return newDecision(states, binding, reason, retry, cost)
}

// takeShare is the local fallback's decision: each bucket holds share of
// its quota (capacity at least 1) in process. The answer is stated in the
// real quotas: "never" (ReasonCostExceedsCapacity) only when the cost is
// above a real capacity; a cost above the shrunken capacity alone is an
// over-limit denial whose retry hint is the time the real bucket takes to
// earn the cost (the store is expected back by then). Balances are the
// local ones scaled back by 1/share: this replica's estimate of the whole.
func (lb *localBuckets) takeShare(keys []string, buckets []quota.Bucket, share float64, cost int64, now time.Time) Decision {
	local := make([]quota.Bucket, len(buckets))
	for i, b := range buckets {
		q := quota.Quota{Capacity: max(1, int64(float64(b.Quota.Capacity)*share)), RefillPerSecond: b.Quota.RefillPerSecond * share}
		local[i] = quota.Bucket{Name: b.Name, Quota: q}
	}
	ld := lb.take(keys, local, cost, now)
	states := make([]BucketState, len(buckets))
	binding := 0
	for i, s := range ld.Buckets {
		states[i] = BucketState{Name: s.Name, Quota: buckets[i].Quota, Tokens: math.Min(float64(buckets[i].Quota.Capacity), s.Tokens/share)}
		if s.Name == ld.Bucket {
			binding = i
		}
	}
	for i, b := range buckets {
		if cost > b.Quota.Capacity {
			return newDecision(states, i, ReasonCostExceedsCapacity, 0, cost)
		}
	}
	switch ld.Reason {
	case ReasonCostExceedsCapacity: // above the share only
		retry := 0.0
		for i, b := range buckets {
			if cost > local[i].Quota.Capacity {
				if w := waitFor(b.Quota, 0, cost); w > retry {
					binding, retry = i, w
				}
			}
		}
		return newDecision(states, binding, ReasonOverLimit, retry, cost)
	case ReasonOverLimit:
		return newDecision(states, binding, ReasonOverLimit, ld.RetryAfter.Seconds(), cost)
	}
	return newDecision(states, binding, ld.Reason, 0, cost)
}

// evict makes room in a full map: it drops the buckets that have refilled
// to capacity (a full bucket dropped is the same as a new one), then, if
// that freed less than a sixteenth of the map, arbitrary ones: past max
// tenants in one outage, some restart full. Callers hold mu.
func (lb *localBuckets) evict(now time.Time) {
	for k, b := range lb.buckets {
		if refill(b.quota, b.tokens, now.Sub(b.last).Seconds()) >= float64(b.quota.Capacity) {
			delete(lb.buckets, k)
		}
	}
	for k := range lb.buckets {
		if len(lb.buckets) <= lb.max-lb.max/16-1 {
			break
		}
		delete(lb.buckets, k)
	}
}

// forget drops the local buckets of keys: their tenant's store call
// succeeded, so the store holds their state again. Only the tenant's own
// answer resets them: another tenant's success during a partial outage says
// nothing about this one's shard.
func (lb *localBuckets) forget(keys []string) {
	lb.mu.Lock()
	if len(lb.buckets) > 0 {
		for _, k := range keys {
			delete(lb.buckets, k)
		}
	}
	lb.mu.Unlock()
}
