package core_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestCircuitBreaker: after the threshold of failures the store is not called
// (answers are immediate), and after the cool-down a probe closes the circuit
// once Redis is back. The cool-down runs on a fake clock, so that a slow
// restart of the server on a loaded machine does not end it early.
func TestCircuitBreaker(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		clock := testkit.NewFakeClock()
		l, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(100)}), append(v.options(),
			core.WithPrefix(redistest.Prefix(t)), core.WithFailurePolicy(core.FailClosed), core.WithClock(clock.Now),
			core.WithCircuitBreaker(3, 300*time.Millisecond), core.WithTimeout(time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tn := quota.Tenant{ID: "t1"}
		srv.Kill()
		for i := range 3 {
			if _, err := l.Allow(ctx, tn, "default", 1); !errors.Is(err, core.ErrStore) {
				t.Fatalf("failure %d: %v", i, err)
			}
		}
		d, err := l.Allow(ctx, tn, "default", 1)
		if !errors.Is(err, core.ErrStore) || d.Reason != core.ReasonFailedClosed || !containsAll(err.Error(), "circuit breaker open") {
			t.Fatalf("open circuit: %+v, %v", d, err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(ctx, tn, "default", 1); err == nil || !containsAll(err.Error(), "circuit breaker open") {
			t.Fatalf("during the cool-down the store must not be called: %v", err)
		}
		clock.Advance(350 * time.Millisecond)
		var ok bool
		for range 3 { // the probe may meet a stale pooled connection once
			if d, err = l.Allow(ctx, tn, "default", 1); err == nil && d.Reason == core.ReasonOK {
				ok = true
				break
			}
			clock.Advance(350 * time.Millisecond)
			time.Sleep(50 * time.Millisecond)
		}
		if !ok {
			t.Fatalf("circuit did not close after Redis came back: %+v, %v", d, err)
		}
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestLocalFallback: while the store is down, the fallback buckets enforce
// share of the quota, and the decisions are marked.
func TestLocalFallback(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		srv.Kill()
		l, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 40, RefillPerSecond: 0.001}}),
			append(v.options(), core.WithLocalFallback(0.25), core.WithFailurePolicy(core.FailClosed))...)
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 20 {
			d, err := l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
			if !errors.Is(err, core.ErrStore) || !d.Fallback || !d.Degraded() {
				t.Fatalf("fallback decision %+v, %v", d, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 10 {
			t.Fatalf("fallback admitted %d, want 10 (a quarter of 40)", admitted)
		}
	})
}

// TestDenyCacheNeverDeniesWhatRedisAdmits drives a random sequence through a
// limiter with the deny cache and a reference limiter without it, on the
// same fake clock and separate keys: every local denial must be one the store
// also makes, and the admitted counts must match exactly.
func TestDenyCacheNeverDeniesWhatRedisAdmits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		clock := testkit.NewFakeClock()
		r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 3}})
		cached := v.newLimiter(t, c, r, core.WithClock(clock.Now), core.WithDenyCache(true))
		plain := v.newLimiter(t, c, r, core.WithClock(clock.Now), core.WithDenyCache(false))
		rng := rand.New(rand.NewPCG(1, 2))
		local := 0
		for i := range 2000 {
			clock.Advance(time.Duration(rng.IntN(200)) * time.Millisecond)
			cost := int64(1 + rng.IntN(3))
			a := check(t, cached, "t1", cost)
			b := check(t, plain, "t1", cost)
			if a.Allowed != b.Allowed || a.Reason != b.Reason {
				t.Fatalf("step %d (cost %d): with deny cache %v (local %v), without %v", i, cost, a.Reason, a.Local, b.Reason)
			}
			if a.Local {
				local++
				if a.RetryAfter > b.RetryAfter+time.Microsecond {
					t.Fatalf("step %d: local retry %v exceeds the store's %v", i, a.RetryAfter, b.RetryAfter)
				}
			}
		}
		if local == 0 {
			t.Fatal("the deny cache never answered")
		}
		t.Logf("%d of 2000 answered locally", local)
	})
}

// TestLocalFallbackJudgesNeverByTheRealQuota: the fallback's shrunken
// buckets make a cost above their capacity but within the real one an
// over-limit denial with a retry hint (the store will be back), never
// "can never be admitted"; headers and body describe the real quota.
func TestLocalFallbackJudgesNeverByTheRealQuota(t *testing.T) {
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	srv.Kill()
	real := quota.Quota{Capacity: 10, RefillPerSecond: 1}
	l, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: real}),
		core.WithLocalFallback(0.1), core.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	d, err := l.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 5) // above the share (1), within the quota (10)
	if !errors.Is(err, core.ErrStore) || !d.Fallback {
		t.Fatalf("%+v, %v", d, err)
	}
	retryAfter := ""
	for _, h := range render.Headers(d, render.HeaderNone, time.Now()) {
		if h.Name == "Retry-After" {
			retryAfter = h.Value
		}
	}
	if d.Reason != core.ReasonOverLimit || d.RetryAfter <= 0 || retryAfter == "" || retryAfter == "0" || render.PushbackMillis(d) <= 0 {
		t.Fatalf("cost 5 of 10 while degraded: reason %v, retry %v, Retry-After %q, pushback %d", d.Reason, d.RetryAfter, retryAfter, render.PushbackMillis(d))
	}
	if d.Limit != 10 || d.Quota != real {
		t.Fatalf("decision describes the shrunken quota: limit %d quota %v", d.Limit, d.Quota)
	}
	h := headerMap(render.Headers(d, render.DefaultHeaderStyle, time.Now()))
	if h["X-RateLimit-Limit"] != "10" || h["Retry-After"] == "" || !strings.Contains(h["RateLimit-Policy"], "q=10") {
		t.Fatalf("headers %v", h)
	}
	if p := render.ProblemOf(d); strings.Contains(p.Detail, "never") {
		t.Fatalf("body: %s", p.Detail)
	}
	// above the real capacity is still "never", judged against it
	d, _ = l.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 11)
	if d.Reason != core.ReasonCostExceedsCapacity || d.Limit != 10 {
		t.Fatalf("cost 11 of 10: %v limit %d", d.Reason, d.Limit)
	}
	// within the share: admitted, reported against the real quota
	d, _ = l.Allow(ctx, quota.Tenant{ID: "t2"}, "default", 1)
	if !d.Allowed || d.Limit != 10 {
		t.Fatalf("cost 1: %+v", d)
	}
}
