package quota_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// overrideSource is a real in-memory Overrides implementation whose answers
// and failures the test controls; it counts lookups.
type overrideSource struct {
	mu    sync.Mutex
	data  map[string]map[string]quota.Quota
	fail  bool
	calls atomic.Int64
	delay time.Duration
}

func (o *overrideSource) Overrides(ctx context.Context, tenantID string) (map[string]quota.Quota, error) {
	o.calls.Add(1)
	o.mu.Lock()
	delay := o.delay
	o.mu.Unlock()
	time.Sleep(delay)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail {
		return nil, errors.New("database is down")
	}
	return o.data[tenantID], nil
}

func (o *overrideSource) set(tenant, bucket string, q quota.Quota, fail bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data == nil {
		o.data = map[string]map[string]quota.Quota{}
	}
	if bucket != "" {
		o.data[tenant] = map[string]quota.Quota{bucket: q}
	} else {
		delete(o.data, tenant)
	}
	o.fail = fail
}

var testTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
	"free": {Classes: map[string]quota.Quota{"default": {Capacity: 20, RefillPerSecond: 2}}, Ceiling: &quota.Quota{Capacity: 100, RefillPerSecond: 10}},
	"pro":  {Classes: map[string]quota.Quota{"default": {Capacity: 200, RefillPerSecond: 50}}},
}}

func TestResolverTiersAndOverrides(t *testing.T) {
	src := &overrideSource{}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r, err := quota.NewResolver(testTiers, quota.WithOverrides(src), quota.WithCacheTTL(30*time.Second), quota.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	qt := func(tn quota.Tenant) quota.Quota {
		t.Helper()
		bs, err := r.Buckets(ctx, tn, "default")
		if err != nil {
			t.Fatal(err)
		}
		return bs[0].Quota
	}
	t42 := quota.Tenant{ID: "t42", Tier: "free"}
	if q := qt(t42); q.Capacity != 20 {
		t.Fatalf("tier default = %v", q)
	}
	if bs, _ := r.Buckets(ctx, t42, "default"); len(bs) != 2 || bs[1].Name != quota.CeilingBucket {
		t.Fatalf("free tier has a ceiling: %+v", bs)
	}
	if q := qt(quota.Tenant{ID: "x"}); q.Capacity != 20 {
		t.Fatalf("empty tier uses the default tier: %v", q)
	}
	if q := qt(quota.Tenant{ID: "p", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("pro = %v", q)
	}
	if _, err := r.Buckets(ctx, quota.Tenant{ID: "x", Tier: "gold"}, "default"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown tier: %v", err)
	}
	if _, err := r.Buckets(ctx, t42, "nope"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown class: %v", err)
	}

	src.set("t42", "default", quota.Quota{Capacity: 500, RefillPerSecond: 5}, false)
	advance(29 * time.Second)
	if q := qt(t42); q.Capacity != 20 {
		t.Fatalf("override applied before the TTL: %v", q)
	}
	advance(2 * time.Second)
	// past the TTL the cached quota serves while it is refreshed in the
	// background, then the override applies
	eventually(t, r, t42, 500)
	// the source fails: the last known override keeps serving
	src.set("t42", "default", quota.Quota{}, true)
	advance(31 * time.Second)
	if q := qt(t42); q.Capacity != 500 {
		t.Fatalf("stale-on-error: %v", q)
	}
	waitStat(t, &r.Stats().LoadErrors, 1)
	if q := qt(t42); q.Capacity != 500 {
		t.Fatalf("stale-on-error after the failed refresh: %v", q)
	}
	if r.Stats().StaleServed.Load() == 0 {
		t.Fatalf("stats: stale %d, errors %d", r.Stats().StaleServed.Load(), r.Stats().LoadErrors.Load())
	}
	// a failing source is retried after a short pause, not on every request
	calls := src.calls.Load()
	qt(t42)
	qt(t42)
	if src.calls.Load() != calls {
		t.Fatalf("a failing source was called on every request")
	}
	// a tenant never loaded gets the tier default while the source fails
	if q := qt(quota.Tenant{ID: "new", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("never loaded + failing source: %v", q)
	}
	// the source recovers, the override is deleted: back to the tier
	src.set("t42", "", quota.Quota{}, false)
	advance(31 * time.Second)
	eventually(t, r, t42, 20)
	// an invalid override is ignored, never enforced
	src.set("t42", "default", quota.Quota{Capacity: -1, RefillPerSecond: 1}, false)
	r.Invalidate("t42")
	if q := qt(t42); q.Capacity != 20 {
		t.Fatalf("invalid override used: %v", q)
	}
}

// eventually polls r until tn's default quota has capacity want (an
// expired entry is refreshed in the background).
func eventually(t *testing.T, r *quota.TieredResolver, tn quota.Tenant, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		bs, err := r.Buckets(context.Background(), tn, "default")
		if err == nil && bs[0].Quota.Capacity == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("capacity %v (%v), want %d", bs, err, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitStat polls a resolver counter until it reaches n.
func waitStat(t *testing.T, c *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("counter %d, want %d", c.Load(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestResolverStaleWhileRevalidate: once cached, a tenant's quota never
// waits for the override source again: an expired entry is served at once
// while a single background lookup refreshes it, however slow the source.
// A first lookup waits no longer than the caller's deadline, then fails.
func TestResolverStaleWhileRevalidate(t *testing.T) {
	src := &overrideSource{}
	src.set("t1", "default", quota.Quota{Capacity: 500, RefillPerSecond: 5}, false)
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	r, err := quota.NewResolver(testTiers, quota.WithOverrides(src), quota.WithCacheTTL(time.Second), quota.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t1 := quota.Tenant{ID: "t1"}
	eventually(t, r, t1, 500)
	src.mu.Lock()
	src.delay = 1500 * time.Millisecond // the database hangs
	src.mu.Unlock()
	now.Add(int64(2 * time.Second))
	start := time.Now()
	for range 50 {
		bs, err := r.Buckets(context.Background(), t1, "default")
		if err != nil || bs[0].Quota.Capacity != 500 {
			t.Fatalf("%v %v", bs, err)
		}
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("50 checks of a cached tenant took %v while the source hung", took)
	}
	waitStat(t, &r.Stats().Loads, 2)
	time.Sleep(50 * time.Millisecond)
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2 (the first and one refresh)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := r.Buckets(ctx, quota.Tenant{ID: "new"}, "default"); err == nil || errors.Is(err, core.ErrResolve) {
		t.Fatalf("first lookup past the deadline: %v", err)
	}
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Fatalf("first lookup waited %v past a 100ms deadline", took)
	}
	waitStat(t, &r.Stats().Loads, 3)
	time.Sleep(1600 * time.Millisecond) // let the slow lookups end (goleak)
}

func TestResolverSingleflight(t *testing.T) {
	src := &overrideSource{delay: 50 * time.Millisecond}
	r, err := quota.NewResolver(testTiers, quota.WithOverrides(src))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Buckets(context.Background(), quota.Tenant{ID: "t1"}, "default"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("50 concurrent misses made %d lookups, want 1", n)
	}
}

func TestResolverSetTiers(t *testing.T) {
	r, err := quota.NewResolver(testTiers)
	if err != nil {
		t.Fatal(err)
	}
	bad := quota.Tiers{Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": {Capacity: 0, RefillPerSecond: 1}}}}}
	if err := r.SetTiers(bad); !errors.Is(err, quota.ErrInvalid) {
		t.Fatalf("invalid tiers accepted: %v", err)
	}
	if r.Tiers().Tiers["free"].Classes["default"].Capacity != 20 {
		t.Fatal("invalid tiers replaced the old ones")
	}
	for _, tc := range []struct {
		name  string
		tiers quota.Tiers
	}{
		{"no tiers", quota.Tiers{}},
		{"missing default", quota.Tiers{Default: "x", Tiers: testTiers.Tiers}},
		{"reserved class", quota.Tiers{Tiers: map[string]quota.Tier{"a": {Classes: map[string]quota.Quota{quota.CeilingBucket: quota.PerSecond(1)}}}}},
		{"bad class name", quota.Tiers{Tiers: map[string]quota.Tier{"a": {Classes: map[string]quota.Quota{"a b": quota.PerSecond(1)}}}}},
		{"no classes", quota.Tiers{Tiers: map[string]quota.Tier{"a": {}}}},
		{"bad ceiling", quota.Tiers{Tiers: map[string]quota.Tier{"a": {Classes: map[string]quota.Quota{"d": quota.PerSecond(1)}, Ceiling: &quota.Quota{}}}}},
	} {
		if _, err := quota.NewResolver(tc.tiers); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestResolverLogsAndBounds(t *testing.T) {
	var logs syncBuffer
	src := &overrideSource{}
	var now atomic.Int64
	r, err := quota.NewResolver(testTiers, quota.WithOverrides(src), quota.WithCacheTTL(time.Second), quota.WithCacheSize(10), quota.
		WithClock(func() time.Time { return time.Unix(0, now.Load()) }), quota.
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src.set("t{1}", "default", quota.Quota{Capacity: 50, RefillPerSecond: 5}, false)
	_, _ = r.Buckets(ctx, quota.Tenant{ID: "t{1}"}, "default")
	src.set("t{1}", "default", quota.Quota{Capacity: 70, RefillPerSecond: 5}, false)
	now.Add(int64(2 * time.Second))
	eventually(t, r, quota.Tenant{ID: "t{1}"}, 70)
	out := logs.String()
	if !strings.Contains(out, "quota override changed") || !strings.Contains(out, "t%7B1%7D") || strings.Contains(out, "t{1}") {
		t.Fatalf("quota change not logged, or the tenant not escaped:\n%s", out)
	}
	src.set("t2", "default", quota.Quota{Capacity: -5, RefillPerSecond: 1}, false)
	_, _ = r.Buckets(ctx, quota.Tenant{ID: "t2"}, "default")
	if !strings.Contains(logs.String(), "ignoring an invalid override") {
		t.Fatalf("invalid override not logged:\n%s", logs.String())
	}
	// the cache stays bounded
	for i := range 100 {
		_, _ = r.Buckets(ctx, quota.Tenant{ID: "many-" + strconv.Itoa(i)}, "default")
	}
	if n := src.calls.Load(); n < 100 {
		t.Fatalf("lookups %d", n)
	}
	calls := src.calls.Load()
	_, _ = r.Buckets(ctx, quota.Tenant{ID: "many-99"}, "default") // the newest is still cached
	if src.calls.Load() != calls {
		t.Fatal("the newest entry was evicted")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
