package quota

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	if _, _, err := r.lookup(ctx, "a", 0); err != nil { // miss: the first load
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
	if _, _, err := r.lookup(ctx, "a", 0); err != nil { // stale: starts a refresh, which joins the held call
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
		if _, _, err := r.lookup(ctx, "a", 0); err != nil {
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

// heldOverrides is an override source that answers no lookup until release
// is closed (a database holding a lock): it counts the lookups, and the
// most in flight at once.
type heldOverrides struct {
	release         chan struct{}
	data            map[string]map[string]Quota
	calls, inFlight atomic.Int64
	maxInFlight     atomic.Int64
}

func (o *heldOverrides) Overrides(ctx context.Context, tenantID string) (map[string]Quota, error) {
	o.calls.Add(1)
	n := o.inFlight.Add(1)
	defer o.inFlight.Add(-1)
	for {
		m := o.maxInFlight.Load()
		if n <= m || o.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-o.release:
		return o.data[tenantID], nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var lateTiers = Tiers{Default: "t", Tiers: map[string]Tier{"t": {Classes: map[string]Quota{DefaultClass: PerSecond(20)}}}}

// waitFor polls cond until it holds, for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestResolverSlowFirstLookupGetsTierDefaults: a tenant's first lookup
// that does not answer within the check timeout is not a store failure:
// the request gets the tier defaults, the answer is counted as late, and
// the lookup goes on to fill the cache, so the tenant's next request gets
// its override without asking the source again.
func TestResolverSlowFirstLookupGetsTierDefaults(t *testing.T) {
	src := &heldOverrides{release: make(chan struct{}), data: map[string]map[string]Quota{"new": {DefaultClass: PerSecond(500)}}}
	r, err := NewResolver(lateTiers, WithOverrides(src), WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const checkTimeout = 20 * time.Millisecond // a Limiter passes its check timeout
	bs, late, err := r.BucketsWithin(context.Background(), Tenant{ID: "new"}, DefaultClass, checkTimeout)
	if err != nil {
		t.Fatalf("a first lookup past the check timeout is an error (the limiter's failure policy): %v", err)
	}
	if bs[0].Quota != PerSecond(20) || late != lateTimeout {
		t.Fatalf("got %v (late %q), want the tier default %v (late %q)", bs, late, PerSecond(20), lateTimeout)
	}
	if n := r.stats.Late.Load(); n != 1 {
		t.Fatalf("late answers counted %d, want 1", n)
	}
	// a second request while the lookup is still held joins it, and is
	// late again
	if bs, late, err := r.BucketsWithin(context.Background(), Tenant{ID: "new"}, DefaultClass, checkTimeout); err != nil || bs[0].Quota != PerSecond(20) || late != lateTimeout {
		t.Fatalf("second request: %v (late %q) %v", bs, late, err)
	}
	close(src.release) // the database answers
	waitFor(t, "the late lookup fills the cache", func() bool { return r.stats.Loads.Load() == 1 && src.inFlight.Load() == 0 })
	waitFor(t, "the cache holds the override", func() bool {
		v, ok := r.cache.Load("new")
		return ok && v.(*cacheEntry).loaded
	})
	bs, late, err = r.BucketsWithin(context.Background(), Tenant{ID: "new"}, DefaultClass, checkTimeout)
	if err != nil || bs[0].Quota != PerSecond(500) || late != "" {
		t.Fatalf("after the lookup answered: %v (late %q) %v, want the override", bs, late, err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d lookups, want 1 (the late one, shared)", n)
	}
	if n := r.stats.Late.Load(); n != 2 {
		t.Fatalf("late answers %d, want 2", n)
	}
}

// TestResolverLookupsBounded: a flood of new tenants while the source
// hangs starts at most WithMaxLookups lookups; every other tenant gets the
// tier defaults at once (counted as late, cause busy), holding no
// goroutine; once the source answers, nothing is left running, and a
// tenant turned away is looked up on its next request.
func TestResolverLookupsBounded(t *testing.T) {
	src := &heldOverrides{release: make(chan struct{})}
	const maxLookups = 4
	r, err := NewResolver(lateTiers, WithOverrides(src), WithTimeout(time.Minute), WithMaxLookups(maxLookups))
	if err != nil {
		t.Fatal(err)
	}
	const checkTimeout = 10 * time.Millisecond
	const tenants = 200
	var wg sync.WaitGroup
	var timeouts, busy, bad atomic.Int64
	for i := range tenants {
		wg.Go(func() {
			bs, late, err := r.BucketsWithin(context.Background(), Tenant{ID: "flood-" + strconv.Itoa(i)}, DefaultClass, checkTimeout)
			switch {
			case err != nil || bs[0].Quota != PerSecond(20):
				bad.Add(1)
			case late == lateTimeout:
				timeouts.Add(1)
			case late == lateBusy:
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 || timeouts.Load()+busy.Load() != tenants {
		t.Fatalf("%d answers not the tier defaults; %d late by timeout, %d busy, want %d in all", bad.Load(), timeouts.Load(), busy.Load(), tenants)
	}
	if c, m := src.calls.Load(), src.maxInFlight.Load(); c != maxLookups || m != maxLookups {
		t.Fatalf("%d lookups started, %d at most in flight; want %d", c, m, maxLookups)
	}
	if timeouts.Load() != maxLookups || r.stats.Late.Load() != tenants {
		t.Fatalf("%d late by timeout (want %d), %d counted late (want %d)", timeouts.Load(), maxLookups, r.stats.Late.Load(), tenants)
	}
	// the goroutines left are the held lookups, nothing per tenant turned away
	held := goleak.IgnoreAnyFunction("github.com/tollgate-go/tollgate/core/quota.(*heldOverrides).Overrides")
	waitFor(t, "only the held lookups remain", func() bool { return goleak.Find(held) == nil })
	close(src.release)
	waitFor(t, "every lookup ends", func() bool { return goleak.Find() == nil })
	// a tenant turned away is looked up on its next request
	for i := range tenants {
		if _, ok := r.cache.Load("flood-" + strconv.Itoa(i)); !ok {
			if _, late, err := r.BucketsWithin(context.Background(), Tenant{ID: "flood-" + strconv.Itoa(i)}, DefaultClass, checkTimeout); err != nil || late != "" {
				t.Fatalf("a turned-away tenant's next request: late %q %v", late, err)
			}
			if c := src.calls.Load(); c != maxLookups+1 {
				t.Fatalf("%d lookups, want %d", c, maxLookups+1)
			}
			break
		}
	}
}
