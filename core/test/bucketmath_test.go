package core_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestLocalArithmeticMatchesTheScript: the limiter's own token-bucket
// arithmetic (the local fallback's buckets and the deny cache's bounds)
// gives the script's answers. Random quotas (one to three buckets), costs
// (peeks and costs above a capacity included) and clock steps (zero, small,
// long enough to refill) drive, on one client clock, a reference limiter on
// a real Redis, a limiter whose store is down answering from the local
// fallback at share 1 (the full quota), and one with the deny cache: after
// every step all three must agree on admission, reason and binding bucket,
// and on the balance, remaining tokens and retry time within float
// tolerance (the script refills in integer microseconds, the limiter in
// seconds).
func TestLocalArithmeticMatchesTheScript(t *testing.T) {
	c := redistest.Client(t)
	down := redistest.NewServer(t)
	dc := down.Client(t)
	down.Kill()
	ctx := context.Background()
	localDenials, fallbackDenials := 0, 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		buckets := make([]quota.Bucket, 1+rng.IntN(3))
		for i := range buckets {
			q := quota.Quota{Capacity: 1 + rng.Int64N(1000), RefillPerSecond: math.Pow(10, -2+5*rng.Float64())}
			buckets[i] = quota.Bucket{Name: "b" + strconv.Itoa(i), Quota: q}
		}
		r := staticResolver(buckets...)
		clock := testkit.NewFakeClock()
		opts := []core.Option{core.WithClock(clock.Now), core.WithBatching(false), core.WithLogger(slog.New(slog.DiscardHandler))}
		ref := newLimiter(t, c, r, append(opts, core.WithDenyCache(false))...)
		deny := newLimiter(t, c, r, append(opts, core.WithDenyCache(true))...)
		// the breaker opens at the first failure and stays open for the
		// whole run: every later check is the fallback's, without a call
		fallback := newLimiter(t, dc, r, append(opts, core.WithDenyCache(false), core.WithLocalFallback(1),
			core.WithTimeout(200*time.Millisecond), core.WithCircuitBreaker(1, 10000*time.Hour))...)
		capacity := buckets[0].Quota.Capacity
		for _, b := range buckets {
			capacity = min(capacity, b.Quota.Capacity)
		}
		for step := range 150 {
			switch k := rng.IntN(10); {
			case k < 3: // same instant
			case k < 9:
				clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
			default:
				clock.Advance(time.Duration(rng.Int64N(int64(10 * time.Minute))))
			}
			var cost int64
			switch k := rng.IntN(20); {
			case k == 0: // a peek
			case k == 1: // above the smallest capacity
				cost = capacity + 1 + rng.Int64N(5)
			default:
				cost = 1 + rng.Int64N(max(1, capacity/3))
			}
			req := core.Request{Tenant: quota.Tenant{ID: "t" + strconv.FormatUint(seed, 10)}, Cost: cost}
			want, err := ref.Check(ctx, req)
			if err != nil {
				t.Fatalf("seed %d step %d: reference: %v", seed, step, err)
			}
			got, err := fallback.Check(ctx, req)
			if !errors.Is(err, core.ErrStore) || !got.Fallback {
				t.Fatalf("seed %d step %d: the fallback did not answer: %+v, %v", seed, step, got, err)
			}
			sameDecision(t, "local fallback", seed, step, buckets, cost, got, want)
			if !got.Allowed {
				fallbackDenials++
			}
			got, err = deny.Check(ctx, req)
			if err != nil {
				t.Fatalf("seed %d step %d: deny cache: %v", seed, step, err)
			}
			sameDecision(t, "deny cache", seed, step, buckets, cost, got, want)
			if got.Local {
				localDenials++
			}
		}
	}
	if fallbackDenials == 0 || localDenials == 0 {
		t.Fatalf("the sequences never exercised a denial: %d by the fallback, %d by the deny cache", fallbackDenials, localDenials)
	}
	t.Logf("%d fallback denials, %d deny-cache answers", fallbackDenials, localDenials)
}

// sameDecision fails unless got is want up to float rounding.
func sameDecision(t *testing.T, what string, seed uint64, step int, buckets []quota.Bucket, cost int64, got, want core.Decision) {
	t.Helper()
	const eps = 1e-6
	tol := func(x float64) float64 { return eps * max(1, math.Abs(x)) }
	bad := got.Allowed != want.Allowed || got.Reason != want.Reason || got.Bucket != want.Bucket ||
		!near(got.Tokens, want.Tokens, tol(want.Tokens)) ||
		!near(got.RetryAfter.Seconds(), want.RetryAfter.Seconds(), tol(want.RetryAfter.Seconds())+1e-6) ||
		len(got.Buckets) != len(want.Buckets)
	// floor of nearly equal balances may differ by one at an integer
	if d := got.Remaining - want.Remaining; d < -1 || d > 1 || (d != 0 && math.Abs(want.Tokens-math.Round(want.Tokens)) > tol(want.Tokens)) {
		bad = true
	}
	for i := range min(len(got.Buckets), len(want.Buckets)) {
		if !near(got.Buckets[i].Tokens, want.Buckets[i].Tokens, tol(want.Buckets[i].Tokens)) {
			bad = true
		}
	}
	if bad {
		t.Fatalf("seed %d step %d, buckets %v, cost %d: %s answered %v (bucket %s, tokens %v, remaining %d, retry %v, all %v); the script %v (bucket %s, tokens %v, remaining %d, retry %v, all %v)",
			seed, step, buckets, cost, what, got.Reason, got.Bucket, got.Tokens, got.Remaining, got.RetryAfter, got.Buckets,
			want.Reason, want.Bucket, want.Tokens, want.Remaining, want.RetryAfter, want.Buckets)
	}
}
