package core_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// llm is the examples' class: capacity 1000, refill 10/s.
var llm = quota.Quota{Capacity: 1000, RefillPerSecond: 10}

func settle(t *testing.T, l *core.Limiter, tenant string, d core.Decision, actual int64) int64 {
	t.Helper()
	f, err := l.Settle(context.Background(), quota.Tenant{ID: tenant}, d, actual)
	if err != nil {
		t.Fatalf("Settle(%s, %d): %v", tenant, actual, err)
	}
	return f
}

func balance(t *testing.T, l *core.Limiter, tenant string, bucket string) float64 {
	t.Helper()
	d := check(t, l, tenant, 0)
	for _, b := range d.Buckets {
		if b.Name == bucket {
			return b.Tokens
		}
	}
	t.Fatalf("no bucket %q in %+v", bucket, d.Buckets)
	return 0
}

// TestSettleUpAndDown: settling charges the difference between the actual
// cost and the estimate, or refunds it, in every bucket of the request, and
// a refund never lifts a balance above its capacity.
func TestSettleUpAndDown(t *testing.T) {
	ceiling := quota.Bucket{Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: 5000, RefillPerSecond: 50}}
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock() // frozen: no refill
		c := be.client(t)
		l := vr.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: llm}, ceiling), core.WithClock(clock.Now))
		d := check(t, l, "up", 100)
		if !d.Allowed {
			t.Fatalf("reserve: %+v", d)
		}
		settle(t, l, "up", d, 300)
		if got := balance(t, l, "up", "default"); got != 700 {
			t.Fatalf("after settling 100 up to 300: %v tokens, want 700", got)
		}
		if got := balance(t, l, "up", quota.CeilingBucket); got != 4700 {
			t.Fatalf("ceiling after settling up: %v tokens, want 4700", got)
		}
		d = check(t, l, "up", 100)
		settle(t, l, "up", d, 20)
		if got := balance(t, l, "up", "default"); got != 680 {
			t.Fatalf("after settling 100 down to 20: %v tokens, want 680", got)
		}
		if got := balance(t, l, "up", quota.CeilingBucket); got != 4680 {
			t.Fatalf("ceiling after settling down: %v tokens, want 4680", got)
		}
		// a refund stops at capacity: the refill meanwhile filled the bucket
		d = check(t, l, "full", 100)
		clock.Advance(20 * time.Second) // 200 tokens of refill: full again
		settle(t, l, "full", d, 0)
		key, _ := l.Keys().Bucket("full", "default")
		if got, _ := stored(t, c, key); got != 1000 { // as stored: a peek reads above capacity as full
			t.Fatalf("refund onto a full bucket: %v tokens stored, want 1000 (capacity)", got)
		}
		// settling to the estimate, or a decision with nothing charged, is no call
		d = check(t, l, "same", 100)
		settle(t, l, "same", d, 100)
		settle(t, l, "same", core.Decision{Reason: core.ReasonFailedOpen, Allowed: true, Cost: 100}, 0)
		if got := balance(t, l, "same", "default"); got != 900 {
			t.Fatalf("settled to the estimate: %v tokens, want 900", got)
		}
		if _, err := l.Settle(context.Background(), quota.Tenant{ID: "same"}, d, -1); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("Settle(-1) = %v, want ErrInvalidRequest", err)
		}
		if _, err := l.Settle(context.Background(), quota.Tenant{ID: "same"}, d, quota.MaxCost+1); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("Settle(MaxCost+1) = %v, want ErrInvalidRequest", err)
		}
		if got := balance(t, l, "same", "default"); got != 900 {
			t.Fatalf("after invalid settles: %v tokens, want 900", got)
		}
	})
}

// TestSettleDebt: settling above the balance leaves a debt; the tenant is
// denied until the refill repays it, Retry-After counting the debt; without
// a cap the debt is carried in full, however deep, and the key lives until
// the bucket is full again.
func TestSettleDebt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
		d := check(t, l, "debt", 100)
		if f := settle(t, l, "debt", d, 1500); f != 0 {
			t.Fatalf("forgiven %d, want 0", f)
		}
		d = check(t, l, "debt", 1)
		if d.Allowed || d.Reason != core.ReasonOverLimit || d.Tokens != -500 || d.Remaining != 0 {
			t.Fatalf("in debt: %+v, want denied over limit at -500 tokens, 0 remaining", d)
		}
		if want := 50100 * time.Millisecond; d.RetryAfter != want {
			t.Fatalf("RetryAfter %v, want %v ((1 + 500 debt) / 10 per second)", d.RetryAfter, want)
		}
		if hs := render.Headers(d, render.HeaderXRateLimit, clock.Now()); len(hs) == 0 {
			t.Fatal("no headers for a denial in debt")
		}
		clock.Advance(50 * time.Second) // repaid to 0: still short of 1
		if d = check(t, l, "debt", 1); d.Allowed {
			t.Fatalf("at 0 tokens: %+v, want denied", d)
		}
		clock.Advance(100 * time.Millisecond)
		if d = check(t, l, "debt", 1); !d.Allowed {
			t.Fatalf("after repaying: %+v, want admitted", d)
		}
		// no cap: a debt beyond one capacity is carried in full, nothing forgiven
		d = check(t, l, "deep", 100)
		if f := settle(t, l, "deep", d, 100+900+1000+7); f != 0 {
			t.Fatalf("forgiven %d, want 0 (no cap: the debt is carried in full)", f)
		}
		if got := balance(t, l, "deep", "default"); got != -1007 {
			t.Fatalf("deep in debt: %v tokens, want -1007", got)
		}
		// the key outlives the debt: it expires no sooner than the bucket
		// is full again, and not long after
		key, _ := l.Keys().Bucket("deep", "default")
		if ttl, err := be.client(t).PTTL(context.Background(), key).Result(); err != nil || ttl < 200700*time.Millisecond || ttl > 202*time.Second {
			t.Fatalf("PTTL in debt = %v, %v, want 200.7s to 202s (time to refill 2007 tokens, plus a second)", ttl, err)
		}
		// 200.7 s of refill later the bucket is full again
		clock.Advance(200700 * time.Millisecond)
		if got := balance(t, l, "deep", "default"); got != 1000 {
			t.Fatalf("repaid: %v tokens, want 1000", got)
		}
	})
}

// TestSettleUnsettledStaysCharged: a reservation never settled (the process
// died, the call was lost) leaves exactly the estimate charged, and so does
// a Verdict whose handler reported nothing.
func TestSettleUnsettledStaysCharged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
		g, err := gate.New(l, gate.WithCostReports(), gate.WithDefaultRoute(gate.Route{Class: "default", Cost: 100}))
		if err != nil {
			t.Fatal(err)
		}
		if d := check(t, l, "lost", 100); !d.Allowed {
			t.Fatalf("reserve: %+v", d)
		}
		if got := balance(t, l, "lost", "default"); got != 900 {
			t.Fatalf("unsettled: %v tokens, want 900", got)
		}
		ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "quiet"})
		v := g.Decide(ctx, gate.Endpoint{Method: "POST", Pattern: "/v1/complete"})
		if _, ok := v.CostContext(ctx); !ok { // the handler reports nothing
			t.Fatal("an admission with a cost has no reservation to settle")
		}
		v.Done()
		if got := balance(t, l, "quiet", "default"); got != 900 {
			t.Fatalf("no report: %v tokens, want 900 (the estimate stands)", got)
		}
	})
}

// TestGateReportCost: a handler's ReportCost on the Verdict's context is
// settled by Done, once; the last report wins.
func TestGateReportCost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
		g, err := gate.New(l, gate.WithCostReports(), gate.WithDefaultRoute(gate.Route{Class: "default", Cost: 100}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "rep"})
		v := g.Decide(ctx, gate.Endpoint{Method: "POST", Pattern: "/v1/complete"})
		hctx, _ := v.CostContext(ctx)
		if err := gate.ReportCost(hctx, 999); err != nil {
			t.Fatal(err)
		}
		if err := gate.ReportCost(hctx, 250); err != nil {
			t.Fatal(err)
		}
		if err := gate.ReportCost(hctx, -1); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("ReportCost(-1) = %v, want ErrInvalidRequest", err)
		}
		v.Done()
		v.Done()
		if got := balance(t, l, "rep", "default"); got != 750 {
			t.Fatalf("reported 250 on an estimate of 100: %v tokens, want 750", got)
		}
		if err := gate.ReportCost(ctx, 5); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("ReportCost without a reservation = %v, want ErrInvalidRequest", err)
		}
	})
}

// TestSettleBoundConcurrent: goroutines reserving a fixed estimate and
// settling a random actual cost, with no refill: the store is charged
// exactly the sum of the admitted requests' actual costs, and the debt
// never exceeds what the requests in flight can add (workers × (largest
// actual − estimate)), the bound docs/semantics.md states.
func TestSettleBoundConcurrent(t *testing.T) {
	const (
		workers  = 8
		each     = 40
		estimate = 200
		maxCost  = 1000
		capacity = 20000
	)
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock() // frozen: refill is 0, so the sums are exact
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: capacity, RefillPerSecond: 1}}), core.WithClock(clock.Now))
		var mu sync.Mutex
		var charged, admitted, denied int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for range each {
					d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "bound"}, Class: "default", Cost: estimate})
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						mu.Lock()
						denied++
						mu.Unlock()
						continue
					}
					actual := 1 + rng.Int64N(maxCost)
					if _, err := l.Settle(context.Background(), quota.Tenant{ID: "bound"}, d, actual); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					charged += actual
					admitted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		got := balance(t, l, "bound", "default")
		if float64(capacity)-got != float64(charged) {
			t.Fatalf("store charged %v, the admitted requests cost %d (admitted %d, denied %d)", float64(capacity)-got, charged, admitted, denied)
		}
		if floor := -float64(workers * (maxCost - estimate)); got < floor {
			t.Fatalf("balance %v below the bound %v", got, floor)
		}
		if denied == 0 || got >= estimate {
			t.Fatalf("balance %v, %d denied: the test never ran the bucket dry", got, denied)
		}
	})
}

// TestGateWithoutCostReports: a gate built without WithCostReports hands
// handlers nothing to report to, and a request costs its route's cost.
func TestGateWithoutCostReports(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
		g, err := gate.New(l, gate.WithDefaultRoute(gate.Route{Class: "default", Cost: 100}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "plain"})
		v := g.Decide(ctx, gate.Endpoint{Method: "POST", Pattern: "/v1/complete"})
		if !v.Proceed {
			t.Fatalf("Decide: %+v", v)
		}
		hctx, ok := v.CostContext(ctx)
		if ok || hctx != ctx {
			t.Fatal("a gate without WithCostReports handed out a context to report a cost to")
		}
		if err := gate.ReportCost(hctx, 5); !errors.Is(err, core.ErrInvalidRequest) {
			t.Fatalf("ReportCost = %v, want ErrInvalidRequest", err)
		}
		v.Done()
		if got := balance(t, l, "plain", "default"); got != 900 {
			t.Fatalf("%v tokens, want 900: the route's cost, nothing settled", got)
		}
	})
}

// TestSettleCurrentQuota: a settle after the tenant's quota changed (a tier
// upgrade between the admission and its settle) uses the quota the resolver
// answers now, not the admission's: a balance the new quota allows is
// charged, never read as garbage under the old capacity and rewritten.
func TestSettleCurrentQuota(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		var upgraded atomic.Bool
		small := quota.Quota{Capacity: 100, RefillPerSecond: 1}
		r := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
			if upgraded.Load() {
				return []quota.Bucket{{Name: "default", Quota: llm}}, nil
			}
			return []quota.Bucket{{Name: "default", Quota: small}}, nil
		})
		l := vr.newLimiter(t, be.client(t), r, core.WithClock(clock.Now))
		d := check(t, l, "up", 1) // 99 left, on the small quota
		if !d.Allowed || d.Quota != small {
			t.Fatalf("reserve: %+v", d)
		}
		upgraded.Store(true)
		clock.Advance(60 * time.Second)               // 99 + 600 on the new quota
		if d2 := check(t, l, "up", 10); !d2.Allowed { // 689 stored
			t.Fatalf("after the upgrade: %+v", d2)
		}
		settle(t, l, "up", d, 2) // one more token
		if got := balance(t, l, "up", "default"); got != 688 {
			t.Fatalf("settled across the upgrade: %v tokens, want 688 (689 less the 1 settled)", got)
		}
	})
}

// TestSettleBoundOverWindow: a tenant reporting 100 times its capacity per
// request (an estimate of 100, an actual cost of 100,000), one request a
// second for 10 minutes of its clock: the actual costs of the admitted
// requests never exceed C + ρT + one request's actual cost over any window
// from the start (docs/semantics.md, "The bound"), and the debt keeps the
// tenant out until the refill repays it.
func TestSettleBoundOverWindow(t *testing.T) {
	const estimate, actual = 100, 100 * 1000
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
		start := clock.Now()
		var used, admitted int64
		for range 600 {
			if d := check(t, l, "hog", estimate); d.Allowed {
				settle(t, l, "hog", d, actual)
				used += actual
				admitted++
			}
			elapsed := clock.Now().Sub(start).Seconds()
			if bound := float64(llm.Capacity) + llm.RefillPerSecond*elapsed + actual; float64(used) > bound {
				t.Fatalf("after %.0fs: %d admitted used %d tokens, above the bound C + ρT + one request's actual cost = %.0f", elapsed, admitted, used, bound)
			}
			clock.Advance(time.Second)
		}
		if admitted != 1 {
			t.Fatalf("%d admitted in 600s, want 1 (the debt of 99,100 takes 9,910s to repay)", admitted)
		}
	})
}

// TestSettleCapCounted: a class whose quota caps the debt (MaxDebt) stops a
// settle's debt at the cap, and the tokens it forgave are returned, counted
// in tollgate.settles.forgiven by class, tier and bucket (and tenant, the
// label on) and logged; a bucket of the same request without a cap (the
// ceiling) carries its debt in full. A class with MaxSettleRatio charges at
// most that multiple of the estimate and counts and logs the rest as
// refused (tollgate.settles.refused).
func TestSettleCapCounted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		var logs testkit.LogBuffer
		clock := testkit.NewFakeClock()
		capped := llm
		capped.MaxDebt = 500
		ratio := llm
		ratio.MaxSettleRatio = 3
		tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {
			Classes: map[string]quota.Quota{"default": capped, "ratio": ratio},
			Ceiling: &quota.Quota{Capacity: 5000, RefillPerSecond: 50}}}}
		res, err := quota.NewResolver(tiers)
		if err != nil {
			t.Fatal(err)
		}
		l := vr.newLimiter(t, be.client(t), res, core.WithClock(clock.Now), core.WithMeterProvider(mp), core.WithTenantLabel(5),
			core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		tn := quota.Tenant{ID: "capped", Tier: "free"}
		d, err := l.Allow(context.Background(), tn, "default", 100)
		if err != nil || !d.Allowed {
			t.Fatalf("reserve: %+v, %v", d, err)
		}
		f, err := l.Settle(context.Background(), tn, d, 100+900+500+42)
		if err != nil || f != 42 {
			t.Fatalf("Settle = %d, %v; want 42 forgiven (a debt of 542 on a cap of 500)", f, err)
		}
		if got := balance(t, l, "capped", "default"); got != -500 {
			t.Fatalf("capped class: %v tokens, want -500", got)
		}
		if got := balance(t, l, "capped", quota.CeilingBucket); got != 5000-1542 {
			t.Fatalf("ceiling (no cap): %v tokens, want %d", got, 5000-1542)
		}
		got := collect(t, reader, "tollgate.settles.forgiven", "class", "tier", "bucket", "tenant")
		if want := map[string]int64{"default/free/default/_other": 42}; !maps.Equal(got, want) {
			t.Fatalf("tollgate.settles.forgiven = %v, want %v", got, want)
		}
		if s := logs.String(); !strings.Contains(s, "a settle did not charge the whole actual cost") || !strings.Contains(s, "tenant=capped") ||
			!strings.Contains(s, "42 tokens forgiven (its debt reached its cap of 500)") || !strings.Contains(s, "uncharged=42") {
			t.Fatalf("log: %q, want the forgiven settle with its tenant and tokens", s)
		}

		// the ratio: 1000 reported on an estimate of 100 charges 300
		tn = quota.Tenant{ID: "ratio", Tier: "free"}
		d, err = l.Allow(context.Background(), tn, "ratio", 100)
		if err != nil || !d.Allowed {
			t.Fatalf("reserve: %+v, %v", d, err)
		}
		if f, err := l.Settle(context.Background(), tn, d, 1000); err != nil || f != 700 {
			t.Fatalf("Settle = %d, %v; want 700 refused (above 3 x 100)", f, err)
		}
		dd, _ := l.Peek(context.Background(), tn, "ratio")
		for _, b := range dd.Buckets {
			if want := map[string]float64{"ratio": 700, quota.CeilingBucket: 4000}[b.Name]; b.Tokens != want {
				t.Fatalf("bucket %s: %v tokens, want %v (the ratio's class charged 300, the ceiling 1000)", b.Name, b.Tokens, want)
			}
		}
		got = collect(t, reader, "tollgate.settles.refused", "class", "bucket")
		if want := map[string]int64{"ratio/ratio": 700}; !maps.Equal(got, want) {
			t.Fatalf("tollgate.settles.refused = %v, want %v", got, want)
		}
	})
}

// TestSettleStorageFloor: without a cap a debt is carried down to 400 days
// of refill, where the key's TTL (the time to refill to full, plus a
// second) stays bounded; a charge beyond it is forgiven and counted, never
// dropped silently, and the key still lives until the bucket is full again.
func TestSettleStorageFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		clock := testkit.NewFakeClock()
		q := quota.Quota{Capacity: 10, RefillPerSecond: 1}
		l := vr.newLimiter(t, be.client(t), staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithClock(clock.Now), core.WithMeterProvider(mp))
		const floor = 400 * 24 * 3600 // 400 days of 1 token a second
		d := check(t, l, "abyss", 1)
		f := settle(t, l, "abyss", d, quota.MaxCost)
		if want := int64(quota.MaxCost) - 1 - 9 - floor; f != want {
			t.Fatalf("forgiven %d, want %d (beyond the storage floor of %d)", f, want, floor)
		}
		if got := balance(t, l, "abyss", "default"); got != -floor {
			t.Fatalf("%v tokens, want %d", got, -floor)
		}
		key, _ := l.Keys().Bucket("abyss", "default")
		full := time.Duration(floor+10) * time.Second
		if ttl, err := be.client(t).PTTL(context.Background(), key).Result(); err != nil || ttl < full || ttl > full+2*time.Second {
			t.Fatalf("PTTL = %v, %v, want %v and a second (the time to refill to full)", ttl, err, full)
		}
		if got := collect(t, reader, "tollgate.settles.forgiven", "bucket"); got["default"] != f {
			t.Fatalf("tollgate.settles.forgiven = %v, want %d for default", got, f)
		}
	})
}

// TestSettleCurrentQuotaAlso: a request of two classes (Also) settles each
// class's bucket under the quota its class resolves to now: the class whose
// quota grew since the reservation is charged, not reset under the old one.
func TestSettleCurrentQuotaAlso(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock()
		var upgraded atomic.Bool
		r := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
			q := quota.Quota{Capacity: 100, RefillPerSecond: 1}
			if class == "extra" && upgraded.Load() {
				q = llm
			}
			return []quota.Bucket{{Name: class, Quota: q}}, nil
		})
		l := vr.newLimiter(t, be.client(t), r, core.WithClock(clock.Now))
		tn := quota.Tenant{ID: "also"}
		d, err := l.Check(context.Background(), core.Request{Tenant: tn, Class: "default", Also: []string{"extra"}, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("reserve: %+v, %v", d, err)
		}
		upgraded.Store(true)
		clock.Advance(60 * time.Second) // extra: 99 + 600 on the new quota; default: full at 100
		if d2, err := l.Check(context.Background(), core.Request{Tenant: tn, Class: "extra", Cost: 10}); err != nil || !d2.Allowed {
			t.Fatalf("after the upgrade: %+v, %v", d2, err)
		}
		settle(t, l, "also", d, 2)
		dd, err := l.Check(context.Background(), core.Request{Tenant: tn, Class: "default", Also: []string{"extra"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range dd.Buckets {
			if want := map[string]float64{"default": 99, "extra": 688}[b.Name]; b.Tokens != want {
				t.Fatalf("bucket %s: %v tokens, want %v", b.Name, b.Tokens, want)
			}
		}
	})
}
