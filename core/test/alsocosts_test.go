package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// alsoCostsTiers: two classes and a concurrency-limited one under one
// tenant-wide ceiling.
var alsoCostsTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
	"default": {Capacity: 10, RefillPerSecond: 1},
	"export":  {Capacity: 6, RefillPerSecond: 1},
	"jobs":    {Capacity: 10, RefillPerSecond: 1, Concurrency: 2},
}, Ceiling: &quota.Quota{Capacity: 100, RefillPerSecond: 1}}}}

// balances peeks (Cost 0) at every bucket of default, export and the
// ceiling.
func balances(t *testing.T, l *core.Limiter, tenant string) map[string]float64 {
	t.Helper()
	d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: tenant}, Class: "default", Also: []string{"export", "jobs"}})
	if err != nil || !d.Allowed {
		t.Fatalf("peek = %+v, %v", d, err)
	}
	out := map[string]float64{}
	for _, b := range d.Buckets {
		out[b.Name] = b.Tokens
	}
	return out
}

func wantBalances(t *testing.T, what string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s = %v, want %v (all balances %v)", what, name, got[name], w, got)
		}
	}
}

// TestAlsoCostsAllOrNothing: classes of one tenant with different costs are
// decided in one script call: each bucket needs its own class's cost, and
// either all are charged or none is; the shared ceiling is charged once, the
// larger cost.
func TestAlsoCostsAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		res, err := quota.NewResolver(alsoCostsTiers)
		if err != nil {
			t.Fatal(err)
		}
		clock := testkit.NewFakeClock()
		l := v.newLimiter(t, c, res, core.WithClock(clock.Now))
		ctx := context.Background()
		tenant := quota.Tenant{ID: "t1"}
		req := core.Request{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{5}}

		d, err := l.Check(ctx, req)
		if err != nil || !d.Allowed || len(d.Buckets) != 3 {
			t.Fatalf("first = %+v, %v; want allowed over 3 buckets", d, err)
		}
		// the decision is of its binding bucket, export: its cost, not the
		// request's main cost
		if d.Bucket != "export" || d.Remaining != 1 || d.Cost != 5 {
			t.Fatalf("binding = %s with %d left, cost %d; want export with 1, cost 5", d.Bucket, d.Remaining, d.Cost)
		}
		// the ceiling is charged once, by the larger cost: 100 - 5
		after := map[string]float64{"default": 9, "export": 1, quota.CeilingBucket: 95}
		wantBalances(t, "after the admission", balances(t, l, "t1"), after)

		// export holds 1 < 5: denied, and default and the ceiling, which
		// have their costs, are not charged either
		d, err = l.Check(ctx, req)
		if err != nil || d.Allowed || d.Reason != core.ReasonOverLimit || d.Bucket != "export" || d.Cost != 5 {
			t.Fatalf("second = %+v, %v; want denied by export, at its cost 5", d, err)
		}
		if d.RetryAfter != 4*time.Second {
			t.Errorf("RetryAfter = %v, want 4s: export's own cost 5 less its 1 token, at 1/s", d.RetryAfter)
		}
		wantBalances(t, "after the denial", balances(t, l, "t1"), after)

		// a cost above an Also class's capacity: never
		big := req
		big.AlsoCosts = []int64{7}
		if d, err = l.Check(ctx, big); err != nil || d.Reason != core.ReasonCostExceedsCapacity || d.Bucket != "export" || d.Cost != 7 {
			t.Fatalf("export cost 7 = %+v, %v; want cost exceeds export's capacity", d, err)
		}
		wantBalances(t, "after cost exceeds capacity", balances(t, l, "t1"), after)

		// a class named twice at two costs: one bucket, charged once, the
		// larger
		twice := core.Request{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"default"}, AlsoCosts: []int64{3}}
		if d, err = l.Check(ctx, twice); err != nil || !d.Allowed || len(d.Buckets) != 2 {
			t.Fatalf("default twice = %+v, %v", d, err)
		}
		after["default"], after[quota.CeilingBucket] = 6, 92
		wantBalances(t, "after default twice", balances(t, l, "t1"), after)

		// the concurrency script: the same all-or-nothing by own costs
		jobs := core.Request{Tenant: tenant, Class: "jobs", Cost: 4, Also: []string{"export"}, AlsoCosts: []int64{2}}
		if d, err = l.Check(ctx, jobs); err != nil || d.Allowed || d.Bucket != "export" || d.Cost != 2 || d.Slot != nil {
			t.Fatalf("jobs 4 + export 2 = %+v, %v; want denied by export at its cost 2, no slot", d, err)
		}
		wantBalances(t, "after the jobs denial", balances(t, l, "t1"), map[string]float64{"jobs": 10, "export": 1, quota.CeilingBucket: 92})
		clock.Advance(time.Second) // export 2
		jobs.AlsoCosts = []int64{1}
		if d, err = l.Check(ctx, jobs); err != nil || !d.Allowed || d.Slot == nil {
			t.Fatalf("jobs 4 + export 1 = %+v, %v; want allowed with a slot", d, err)
		}
		d.Slot.Release()
		wantBalances(t, "after the jobs admission", balances(t, l, "t1"), map[string]float64{"jobs": 6, "export": 1, "default": 7, quota.CeilingBucket: 89})

		// a mixed-cost decision cannot be settled by one difference
		if _, err := l.Settle(ctx, tenant, d, 2); !errors.Is(err, core.ErrInvalidRequest) {
			t.Errorf("Settle of a mixed-cost decision: %v, want ErrInvalidRequest", err)
		}
	})
}

// TestAlsoCostsOneBucket: classes that resolve to one bucket are charged
// once, the largest cost (the script's one-bucket path with per-bucket
// costs).
func TestAlsoCostsOneBucket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		l := v.newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "shared", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 0.001}}))
		ctx := context.Background()
		req := core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "a", Cost: 1, Also: []string{"b"}, AlsoCosts: []int64{4}}
		for i, want := range []float64{6, 2} {
			d, err := l.Check(ctx, req)
			if err != nil || !d.Allowed || len(d.Buckets) != 1 || int64(d.Tokens) != int64(want) {
				t.Fatalf("check %d = %+v, %v; want allowed with %v left", i, d, err, want)
			}
		}
		d, err := l.Check(ctx, req)
		if err != nil || d.Allowed || d.Reason != core.ReasonOverLimit {
			t.Fatalf("third = %+v, %v; want over limit (2 < 4)", d, err)
		}
		if d, _ := l.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "a"}); int64(d.Tokens) != 2 {
			t.Fatalf("after the denial: %v tokens, want 2", d.Tokens)
		}
	})
}

// TestAlsoCostsInvalid: AlsoCosts of the wrong length or with a cost out of
// range is an invalid request, and nothing is charged.
func TestAlsoCostsInvalid(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		res, err := quota.NewResolver(alsoCostsTiers)
		if err != nil {
			t.Fatal(err)
		}
		l := v.newLimiter(t, b.client(t), res, core.WithClock(testkit.NewFakeClock().Now))
		tenant := quota.Tenant{ID: "t1"}
		for _, req := range []core.Request{
			{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{}},
			{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{1, 2}},
			{Tenant: tenant, Class: "default", Cost: 1, AlsoCosts: []int64{1}},
			{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{-1}},
			{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{quota.MaxCost + 1}},
		} {
			d, err := l.Check(context.Background(), req)
			if !errors.Is(err, core.ErrInvalidRequest) || d.Reason != core.ReasonInvalid || d.Allowed {
				t.Errorf("AlsoCosts %v for Also %v: %+v, %v; want ErrInvalidRequest", req.AlsoCosts, req.Also, d, err)
			}
		}
		wantBalances(t, "after the invalid requests", balances(t, l, "t1"), map[string]float64{"default": 10, "export": 6, quota.CeilingBucket: 100})
	})
}

// TestAlsoCostsNotAnsweredLocally: the deny cache, which proves denials of
// one cost, never answers a mixed-cost request (here it would deny it
// wrongly: export holds the 1 it asks, not the request's 5, over the bucket
// set whose denial at 5 it remembers), and with the store down the local
// fallback leaves it to the failure policy.
func TestAlsoCostsNotAnsweredLocally(t *testing.T) {
	t.Run("deny cache", func(t *testing.T) {
		res, err := quota.NewResolver(alsoCostsTiers)
		if err != nil {
			t.Fatal(err)
		}
		l := newLimiter(t, redistest.Client(t), res, core.WithDenyCache(true), core.WithClock(testkit.NewFakeClock().Now))
		ctx := context.Background()
		tenant := quota.Tenant{ID: "t1"}
		if d, err := l.Allow(ctx, tenant, "export", 5); err != nil || !d.Allowed {
			t.Fatalf("export 5: %+v, %v", d, err)
		}
		// default and export at one cost, 5: export holds 1, denied, and the
		// deny cache remembers the denial of this bucket set
		both := core.Request{Tenant: tenant, Class: "default", Cost: 5, Also: []string{"export"}}
		if d, err := l.Check(ctx, both); err != nil || d.Allowed || d.Bucket != "export" {
			t.Fatalf("default + export at 5: %+v, %v", d, err)
		}
		if d, _ := l.Check(ctx, both); !d.Local {
			t.Fatalf("the deny cache did not answer it again: %+v", d)
		}
		// the same buckets, export at 1: admitted, by the store
		d, err := l.Check(ctx, core.Request{Tenant: tenant, Class: "default", Cost: 5, Also: []string{"export"}, AlsoCosts: []int64{1}})
		if err != nil || !d.Allowed || d.Local {
			t.Fatalf("default 5 + export 1 = %+v, %v; want admitted by the store", d, err)
		}
		wantBalances(t, "after the admission", balances(t, l, "t1"), map[string]float64{"default": 5, "export": 0, quota.CeilingBucket: 90})
	})
	t.Run("local fallback", func(t *testing.T) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		srv.Kill()
		res, err := quota.NewResolver(alsoCostsTiers)
		if err != nil {
			t.Fatal(err)
		}
		for _, policy := range []core.FailurePolicy{core.FailOpen, core.FailClosed} {
			l, err := core.New(c, res, core.WithLocalFallback(1), core.WithFailurePolicy(policy))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tenant := quota.Tenant{ID: "t1"}
			if d, err := l.Allow(ctx, tenant, "default", 1); !errors.Is(err, core.ErrStore) || !d.Fallback {
				t.Fatalf("one cost: %+v, %v; want the fallback's answer", d, err)
			}
			d, err := l.Check(ctx, core.Request{Tenant: tenant, Class: "default", Cost: 1, Also: []string{"export"}, AlsoCosts: []int64{5}})
			want := core.ReasonFailedOpen
			if policy == core.FailClosed {
				want = core.ReasonFailedClosed
			}
			if !errors.Is(err, core.ErrStore) || d.Fallback || d.Reason != want {
				t.Errorf("policy %v, mixed costs: %+v, %v; want %v, not the fallback's", policy, d, err, want)
			}
			_ = l.Close()
		}
	})
}
