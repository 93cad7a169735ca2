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
	tgquota "github.com/tollgate-go/tollgate/core/quota"
)

// overrideSource is a real in-memory Overrides implementation whose answers
// and failures the test controls; it counts lookups.
type overrideSource struct {
	mu    sync.Mutex
	data  map[string]map[string]tgquota.Quota
	fail  bool
	calls atomic.Int64
	delay time.Duration
}

func (o *overrideSource) Overrides(ctx context.Context, tenantID string) (map[string]tgquota.Quota, error) {
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

func (o *overrideSource) set(tenant, bucket string, q tgquota.Quota, fail bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data == nil {
		o.data = map[string]map[string]tgquota.Quota{}
	}
	if bucket != "" {
		o.data[tenant] = map[string]tgquota.Quota{bucket: q}
	} else {
		delete(o.data, tenant)
	}
	o.fail = fail
}

var testTiers = tgquota.Tiers{Default: "free", Tiers: map[string]tgquota.Tier{
	"free": {Classes: map[string]tgquota.Quota{"default": {Capacity: 20, RefillPerSecond: 2}}, Ceiling: &tgquota.Quota{Capacity: 100, RefillPerSecond: 10}},
	"pro":  {Classes: map[string]tgquota.Quota{"default": {Capacity: 200, RefillPerSecond: 50}}},
}}

func TestResolverTiersAndOverrides(t *testing.T) {
	src := &overrideSource{}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r, err := tgquota.NewResolver(testTiers, tgquota.WithOverrides(src), tgquota.WithCacheTTL(30*time.Second), tgquota.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quota := func(tn tgquota.Tenant) tgquota.Quota {
		t.Helper()
		bs, err := r.Buckets(ctx, tn, "default")
		if err != nil {
			t.Fatal(err)
		}
		return bs[0].Quota
	}
	t42 := tgquota.Tenant{ID: "t42", Tier: "free"}
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("tier default = %v", q)
	}
	if bs, _ := r.Buckets(ctx, t42, "default"); len(bs) != 2 || bs[1].Name != tgquota.CeilingBucket {
		t.Fatalf("free tier has a ceiling: %+v", bs)
	}
	if q := quota(tgquota.Tenant{ID: "x"}); q.Capacity != 20 {
		t.Fatalf("empty tier uses the default tier: %v", q)
	}
	if q := quota(tgquota.Tenant{ID: "p", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("pro = %v", q)
	}
	if _, err := r.Buckets(ctx, tgquota.Tenant{ID: "x", Tier: "gold"}, "default"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown tier: %v", err)
	}
	if _, err := r.Buckets(ctx, t42, "nope"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown class: %v", err)
	}

	src.set("t42", "default", tgquota.Quota{Capacity: 500, RefillPerSecond: 5}, false)
	advance(29 * time.Second)
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("override applied before the TTL: %v", q)
	}
	advance(2 * time.Second)
	// past the TTL the cached quota serves while it is refreshed in the
	// background, then the override applies
	eventually(t, r, t42, 500)
	// the source fails: the last known override keeps serving
	src.set("t42", "default", tgquota.Quota{}, true)
	advance(31 * time.Second)
	if q := quota(t42); q.Capacity != 500 {
		t.Fatalf("stale-on-error: %v", q)
	}
	waitStat(t, &r.Stats().LoadErrors, 1)
	if q := quota(t42); q.Capacity != 500 {
		t.Fatalf("stale-on-error after the failed refresh: %v", q)
	}
	if r.Stats().StaleServed.Load() == 0 {
		t.Fatalf("stats: stale %d, errors %d", r.Stats().StaleServed.Load(), r.Stats().LoadErrors.Load())
	}
	// a failing source is retried after a short pause, not on every request
	calls := src.calls.Load()
	quota(t42)
	quota(t42)
	if src.calls.Load() != calls {
		t.Fatalf("a failing source was called on every request")
	}
	// a tenant never loaded gets the tier default while the source fails
	if q := quota(tgquota.Tenant{ID: "new", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("never loaded + failing source: %v", q)
	}
	// the source recovers, the override is deleted: back to the tier
	src.set("t42", "", tgquota.Quota{}, false)
	advance(31 * time.Second)
	eventually(t, r, t42, 20)
	// an invalid override is ignored, never enforced
	src.set("t42", "default", tgquota.Quota{Capacity: -1, RefillPerSecond: 1}, false)
	r.Invalidate("t42")
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("invalid override used: %v", q)
	}
}

// eventually polls r until tn's default quota has capacity want (an
// expired entry is refreshed in the background).
func eventually(t *testing.T, r *tgquota.TieredResolver, tn tgquota.Tenant, want int64) {
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
	src.set("t1", "default", tgquota.Quota{Capacity: 500, RefillPerSecond: 5}, false)
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	r, err := tgquota.NewResolver(testTiers, tgquota.WithOverrides(src), tgquota.WithCacheTTL(time.Second), tgquota.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t1 := tgquota.Tenant{ID: "t1"}
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
	if _, err := r.Buckets(ctx, tgquota.Tenant{ID: "new"}, "default"); err == nil || errors.Is(err, core.ErrResolve) {
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
	r, err := tgquota.NewResolver(testTiers, tgquota.WithOverrides(src))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Buckets(context.Background(), tgquota.Tenant{ID: "t1"}, "default"); err != nil {
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
	r, err := tgquota.NewResolver(testTiers)
	if err != nil {
		t.Fatal(err)
	}
	bad := tgquota.Tiers{Tiers: map[string]tgquota.Tier{"free": {Classes: map[string]tgquota.Quota{"default": {Capacity: 0, RefillPerSecond: 1}}}}}
	if err := r.SetTiers(bad); !errors.Is(err, tgquota.ErrInvalid) {
		t.Fatalf("invalid tiers accepted: %v", err)
	}
	if r.Tiers().Tiers["free"].Classes["default"].Capacity != 20 {
		t.Fatal("invalid tiers replaced the old ones")
	}
	for _, tc := range []struct {
		name  string
		tiers tgquota.Tiers
	}{
		{"no tiers", tgquota.Tiers{}},
		{"missing default", tgquota.Tiers{Default: "x", Tiers: testTiers.Tiers}},
		{"reserved class", tgquota.Tiers{Tiers: map[string]tgquota.Tier{"a": {Classes: map[string]tgquota.Quota{tgquota.CeilingBucket: tgquota.PerSecond(1)}}}}},
		{"bad class name", tgquota.Tiers{Tiers: map[string]tgquota.Tier{"a": {Classes: map[string]tgquota.Quota{"a b": tgquota.PerSecond(1)}}}}},
		{"no classes", tgquota.Tiers{Tiers: map[string]tgquota.Tier{"a": {}}}},
		{"bad ceiling", tgquota.Tiers{Tiers: map[string]tgquota.Tier{"a": {Classes: map[string]tgquota.Quota{"d": tgquota.PerSecond(1)}, Ceiling: &tgquota.Quota{}}}}},
	} {
		if _, err := tgquota.NewResolver(tc.tiers); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestResolverLogsAndBounds(t *testing.T) {
	var logs syncBuffer
	src := &overrideSource{}
	var now atomic.Int64
	r, err := tgquota.NewResolver(testTiers, tgquota.WithOverrides(src), tgquota.WithCacheTTL(time.Second), tgquota.WithCacheSize(10), tgquota.
		WithClock(func() time.Time { return time.Unix(0, now.Load()) }), tgquota.
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src.set("t{1}", "default", tgquota.Quota{Capacity: 50, RefillPerSecond: 5}, false)
	_, _ = r.Buckets(ctx, tgquota.Tenant{ID: "t{1}"}, "default")
	src.set("t{1}", "default", tgquota.Quota{Capacity: 70, RefillPerSecond: 5}, false)
	now.Add(int64(2 * time.Second))
	eventually(t, r, tgquota.Tenant{ID: "t{1}"}, 70)
	out := logs.String()
	if !strings.Contains(out, "quota override changed") || !strings.Contains(out, "t%7B1%7D") || strings.Contains(out, "t{1}") {
		t.Fatalf("quota change not logged, or the tenant not escaped:\n%s", out)
	}
	src.set("t2", "default", tgquota.Quota{Capacity: -5, RefillPerSecond: 1}, false)
	_, _ = r.Buckets(ctx, tgquota.Tenant{ID: "t2"}, "default")
	if !strings.Contains(logs.String(), "ignoring an invalid override") {
		t.Fatalf("invalid override not logged:\n%s", logs.String())
	}
	// the cache stays bounded
	for i := range 100 {
		_, _ = r.Buckets(ctx, tgquota.Tenant{ID: "many-" + strconv.Itoa(i)}, "default")
	}
	if n := src.calls.Load(); n < 100 {
		t.Fatalf("lookups %d", n)
	}
	calls := src.calls.Load()
	_, _ = r.Buckets(ctx, tgquota.Tenant{ID: "many-99"}, "default") // the newest is still cached
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
