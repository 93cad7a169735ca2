package core_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

// TestCircuitBreaker: after the threshold of failures the store is not called
// (answers are immediate), and after the cool-down a probe closes the circuit
// once Redis is back.
func TestCircuitBreaker(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		l, err := core.New(c, staticResolver(core.Bucket{Name: "default", Quota: core.PerSecond(100)}), append(v.options(),
			core.WithPrefix(redistest.Prefix(t)), core.WithFailurePolicy(core.FailClosed),
			core.WithCircuitBreaker(3, 300*time.Millisecond), core.WithTimeout(time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tn := core.Tenant{ID: "t1"}
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
		time.Sleep(350 * time.Millisecond)
		var ok bool
		for range 3 { // the probe may meet a stale pooled connection once
			if d, err = l.Allow(ctx, tn, "default", 1); err == nil && d.Reason == core.ReasonOK {
				ok = true
				break
			}
			time.Sleep(350 * time.Millisecond)
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
		l, err := core.New(c, staticResolver(core.Bucket{Name: "default", Quota: core.Quota{Capacity: 40, RefillPerSecond: 0.001}}),
			append(v.options(), core.WithLocalFallback(0.25), core.WithFailurePolicy(core.FailClosed))...)
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 20 {
			d, err := l.Allow(context.Background(), core.Tenant{ID: "t1"}, "default", 1)
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
		clock := newFakeClock()
		r := staticResolver(core.Bucket{Name: "default", Quota: core.Quota{Capacity: 5, RefillPerSecond: 3}})
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
