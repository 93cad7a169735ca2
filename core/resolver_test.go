package core_test

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
)

// overrideSource is a real in-memory Overrides implementation whose answers
// and failures the test controls; it counts lookups.
type overrideSource struct {
	mu    sync.Mutex
	data  map[string]map[string]core.Quota
	fail  bool
	calls atomic.Int64
	delay time.Duration
}

func (o *overrideSource) Overrides(ctx context.Context, tenantID string) (map[string]core.Quota, error) {
	o.calls.Add(1)
	time.Sleep(o.delay)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail {
		return nil, errors.New("database is down")
	}
	return o.data[tenantID], nil
}

func (o *overrideSource) set(tenant, bucket string, q core.Quota, fail bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data == nil {
		o.data = map[string]map[string]core.Quota{}
	}
	if bucket != "" {
		o.data[tenant] = map[string]core.Quota{bucket: q}
	} else {
		delete(o.data, tenant)
	}
	o.fail = fail
}

var testTiers = core.Tiers{Default: "free", Tiers: map[string]core.Tier{
	"free": {Classes: map[string]core.Quota{"default": {Capacity: 20, RefillPerSecond: 2}}, Ceiling: &core.Quota{Capacity: 100, RefillPerSecond: 10}},
	"pro":  {Classes: map[string]core.Quota{"default": {Capacity: 200, RefillPerSecond: 50}}},
}}

func TestResolverTiersAndOverrides(t *testing.T) {
	src := &overrideSource{}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r, err := core.NewResolver(testTiers, core.WithOverrides(src), core.WithOverrideCacheTTL(30*time.Second), core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quota := func(tn core.Tenant) core.Quota {
		t.Helper()
		bs, err := r.Buckets(ctx, tn, "default")
		if err != nil {
			t.Fatal(err)
		}
		return bs[0].Quota
	}
	t42 := core.Tenant{ID: "t42", Tier: "free"}
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("tier default = %v", q)
	}
	if bs, _ := r.Buckets(ctx, t42, "default"); len(bs) != 2 || bs[1].Name != core.CeilingBucket {
		t.Fatalf("free tier has a ceiling: %+v", bs)
	}
	if q := quota(core.Tenant{ID: "x"}); q.Capacity != 20 {
		t.Fatalf("empty tier uses the default tier: %v", q)
	}
	if q := quota(core.Tenant{ID: "p", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("pro = %v", q)
	}
	if _, err := r.Buckets(ctx, core.Tenant{ID: "x", Tier: "gold"}, "default"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown tier: %v", err)
	}
	if _, err := r.Buckets(ctx, t42, "nope"); !errors.Is(err, core.ErrResolve) {
		t.Fatalf("unknown class: %v", err)
	}

	src.set("t42", "default", core.Quota{Capacity: 500, RefillPerSecond: 5}, false)
	advance(29 * time.Second)
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("override applied before the TTL: %v", q)
	}
	advance(2 * time.Second)
	if q := quota(t42); q.Capacity != 500 {
		t.Fatalf("override not applied after the TTL: %v", q)
	}
	// the source fails: the last known override keeps serving
	src.set("t42", "default", core.Quota{}, true)
	advance(31 * time.Second)
	if q := quota(t42); q.Capacity != 500 {
		t.Fatalf("stale-on-error: %v", q)
	}
	if r.Stats().StaleServed.Load() == 0 || r.Stats().LoadErrors.Load() == 0 {
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
	if q := quota(core.Tenant{ID: "new", Tier: "pro"}); q.Capacity != 200 {
		t.Fatalf("never loaded + failing source: %v", q)
	}
	// the source recovers, the override is deleted: back to the tier
	src.set("t42", "", core.Quota{}, false)
	advance(31 * time.Second)
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("deleted override: %v", q)
	}
	// an invalid override is ignored, never enforced
	src.set("t42", "default", core.Quota{Capacity: -1, RefillPerSecond: 1}, false)
	r.Invalidate("t42")
	if q := quota(t42); q.Capacity != 20 {
		t.Fatalf("invalid override used: %v", q)
	}
}

func TestResolverSingleflight(t *testing.T) {
	src := &overrideSource{delay: 50 * time.Millisecond}
	r, err := core.NewResolver(testTiers, core.WithOverrides(src))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Buckets(context.Background(), core.Tenant{ID: "t1"}, "default"); err != nil {
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
	r, err := core.NewResolver(testTiers)
	if err != nil {
		t.Fatal(err)
	}
	bad := core.Tiers{Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{"default": {Capacity: 0, RefillPerSecond: 1}}}}}
	if err := r.SetTiers(bad); !errors.Is(err, core.ErrInvalidQuota) {
		t.Fatalf("invalid tiers accepted: %v", err)
	}
	if r.Tiers().Tiers["free"].Classes["default"].Capacity != 20 {
		t.Fatal("invalid tiers replaced the old ones")
	}
	for _, tc := range []struct {
		name  string
		tiers core.Tiers
	}{
		{"no tiers", core.Tiers{}},
		{"missing default", core.Tiers{Default: "x", Tiers: testTiers.Tiers}},
		{"reserved class", core.Tiers{Tiers: map[string]core.Tier{"a": {Classes: map[string]core.Quota{core.CeilingBucket: core.PerSecond(1)}}}}},
		{"bad class name", core.Tiers{Tiers: map[string]core.Tier{"a": {Classes: map[string]core.Quota{"a b": core.PerSecond(1)}}}}},
		{"no classes", core.Tiers{Tiers: map[string]core.Tier{"a": {}}}},
		{"bad ceiling", core.Tiers{Tiers: map[string]core.Tier{"a": {Classes: map[string]core.Quota{"d": core.PerSecond(1)}, Ceiling: &core.Quota{}}}}},
	} {
		if _, err := core.NewResolver(tc.tiers); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestResolverLogsAndBounds(t *testing.T) {
	var logs syncBuffer
	src := &overrideSource{}
	now := time.Unix(0, 0)
	r, err := core.NewResolver(testTiers, core.WithOverrides(src), core.WithOverrideCacheTTL(time.Second), core.WithOverrideCacheSize(10),
		core.WithClock(func() time.Time { return now }),
		core.WithResolverLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src.set("t{1}", "default", core.Quota{Capacity: 50, RefillPerSecond: 5}, false)
	_, _ = r.Buckets(ctx, core.Tenant{ID: "t{1}"}, "default")
	src.set("t{1}", "default", core.Quota{Capacity: 70, RefillPerSecond: 5}, false)
	now = now.Add(2 * time.Second)
	_, _ = r.Buckets(ctx, core.Tenant{ID: "t{1}"}, "default")
	out := logs.String()
	if !strings.Contains(out, "quota override changed") || !strings.Contains(out, "t%7B1%7D") || strings.Contains(out, "t{1}") {
		t.Fatalf("quota change not logged, or the tenant not escaped:\n%s", out)
	}
	src.set("t2", "default", core.Quota{Capacity: -5, RefillPerSecond: 1}, false)
	_, _ = r.Buckets(ctx, core.Tenant{ID: "t2"}, "default")
	if !strings.Contains(logs.String(), "ignoring an invalid override") {
		t.Fatalf("invalid override not logged:\n%s", logs.String())
	}
	// the cache stays bounded
	for i := range 100 {
		_, _ = r.Buckets(ctx, core.Tenant{ID: "many-" + strconv.Itoa(i)}, "default")
	}
	if n := src.calls.Load(); n < 100 {
		t.Fatalf("lookups %d", n)
	}
	calls := src.calls.Load()
	_, _ = r.Buckets(ctx, core.Tenant{ID: "many-99"}, "default") // the newest is still cached
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
