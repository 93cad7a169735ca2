package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingOverrides answers every lookup with the same override and counts
// the lookups.
type countingOverrides struct{ calls atomic.Int64 }

func (o *countingOverrides) Overrides(context.Context, string) (map[string]Quota, error) {
	o.calls.Add(1)
	return map[string]Quota{DefaultClass: PerSecond(7)}, nil
}

// TestResolverRefreshNotSwallowed: the background refresh of an expired
// entry goes through the tenant's singleflight key. When that key is still
// held by a call that began before the entry expired (a refresh finishing
// at that moment), the new refresh joins it, takes its answer and loads
// nothing. The entry must not stay marked as refreshing after that: the
// next request has to start a refresh of its own, or the tenant's
// overrides are served stale forever.
func TestResolverRefreshNotSwallowed(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	src := &countingOverrides{}
	r, err := NewResolver(Tiers{Tiers: map[string]Tier{"t": {Classes: map[string]Quota{DefaultClass: PerSecond(1)}}}},
		WithOverrides(src), WithCacheTTL(time.Second), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.lookup(ctx, "a"); err != nil { // miss: the first load
		t.Fatal(err)
	}

	// a call on the tenant's key that is still in flight when the entry
	// expires
	release, held := make(chan struct{}), make(chan struct{})
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		r.group.Do("a", func() (any, error) { close(held); <-release; return map[string]Quota(nil), nil })
	}()
	<-held
	advance(2 * time.Second)
	if _, err := r.lookup(ctx, "a"); err != nil { // stale: starts a refresh, which joins the held call
		t.Fatal(err)
	}
	// give the refresh goroutine time to join the held call, then let it go
	time.Sleep(50 * time.Millisecond)
	close(release)
	<-joined
	loadsBefore := src.calls.Load()

	// the next requests must refresh the entry
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.lookup(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if src.calls.Load() > loadsBefore && r.stats.Hits.Load() > 0 {
			v, _ := r.cache.Load("a")
			if e := v.(*cacheEntry); clock().Before(e.expires) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the expired entry was never refreshed: %d loads (%d before the swallowed refresh), %d stale answers",
		src.calls.Load(), loadsBefore, r.stats.StaleServed.Load())
}
