package core_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// holdGate is a gate over one tier whose default class has quota q, the
// class held for up to maxWait.
func holdGate(t *testing.T, q quota.Quota, maxWait time.Duration, opts ...gate.Option) (*gate.Gate, *core.Limiter) {
	t.Helper()
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": q}}}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, redistest.Client(t), res)
	g, err := gate.New(l, append([]gate.Option{gate.WithHold("default", maxWait)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g, l
}

func holdCtx(id string) context.Context {
	return gate.ContextWithTenant(context.Background(), quota.Tenant{ID: id, Tier: "free"})
}

var holdEndpoint = gate.Endpoint{Method: http.MethodGet, Pattern: "/v1/items"}

// holdBalance is tenant id's exact balance of the default class, by a peek.
func holdBalance(t *testing.T, l *core.Limiter, id string) float64 {
	t.Helper()
	d, err := l.Peek(context.Background(), quota.Tenant{ID: id, Tier: "free"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	return d.Tokens
}

// A tenant over its rate by a little is held and served, not refused: the
// gate waits for its reservation's time, within the class's max wait, and
// says how long in the header.
func TestGateHoldServes(t *testing.T) {
	const maxWait = 2 * time.Second
	g, _ := holdGate(t, quota.Quota{Capacity: 1, RefillPerSecond: 4}, maxWait)
	ctx := holdCtx("held")
	if v := g.Decide(ctx, holdEndpoint); !v.Proceed || v.Held != 0 {
		t.Fatalf("first request: %+v, want admitted at once", v)
	}
	v := g.Decide(ctx, holdEndpoint)
	if !v.Proceed || v.Decision.Reason != core.ReasonOK {
		t.Fatalf("second request: status %d reason %v, want held and served", v.Status, v.Decision.Reason)
	}
	if v.Held <= 0 || v.Held > maxWait {
		t.Fatalf("held %v, want above 0 and at most the max wait %v", v.Held, maxWait)
	}
	h := headerMap(v.Headers)
	if want := strconv.FormatInt(int64((v.Held+time.Millisecond-1)/time.Millisecond), 10); h[gate.HeldHeader] != want {
		t.Fatalf("%s = %q, want %q", gate.HeldHeader, h[gate.HeldHeader], want)
	}
	if g.Holding() != 0 {
		t.Fatalf("holding %d after the hold", g.Holding())
	}
}

// A wait longer than the max wait is the usual 429 and charges nothing.
func TestGateHoldBeyondMaxWait(t *testing.T) {
	g, l := holdGate(t, quota.Quota{Capacity: 2, RefillPerSecond: 0.01}, 100*time.Millisecond)
	ctx := holdCtx("far")
	if v := g.Decide(ctx, holdEndpoint); !v.Proceed {
		t.Fatalf("first: %+v", v)
	}
	before := holdBalance(t, l, "far")
	v := g.Decide(gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "far", Tier: "free"}),
		gate.Endpoint{Method: http.MethodGet, Pattern: "/v1/items", Route: gate.Route{Class: "default", Cost: 2}})
	if v.Proceed || v.Status != http.StatusTooManyRequests || v.Decision.Reason != core.ReasonOverLimit || v.Held != 0 {
		t.Fatalf("verdict status %d reason %v held %v, want a 429 without a hold", v.Status, v.Decision.Reason, v.Held)
	}
	if _, ok := headerMap(v.Headers)[gate.HeldHeader]; ok {
		t.Fatalf("a refused request carries %s", gate.HeldHeader)
	}
	if after := holdBalance(t, l, "far"); after < before {
		t.Fatalf("balance %v after the refusal, %v before: it was charged", after, before)
	}
}

// A client that leaves while held cancels its reservation: the tokens come
// back, and the answer is the caller's cancellation, not an admission.
func TestGateHoldCancelReturnsTokens(t *testing.T) {
	g, l := holdGate(t, quota.Quota{Capacity: 1, RefillPerSecond: 0.05}, time.Minute)
	ctx := holdCtx("leaver")
	if v := g.Decide(ctx, holdEndpoint); !v.Proceed {
		t.Fatalf("first: %+v", v)
	}
	before := holdBalance(t, l, "leaver")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan gate.Verdict, 1)
	go func() { done <- g.Decide(cctx, holdEndpoint) }()
	deadline := time.Now().Add(10 * time.Second)
	for g.Holding() == 0 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("the request was never held")
		}
		time.Sleep(time.Millisecond)
	}
	// held: the bucket carries the reservation's debt
	if b := holdBalance(t, l, "leaver"); b > before-0.5 {
		cancel()
		t.Fatalf("balance %v while held, %v before: the reservation charged nothing", b, before)
	}
	cancel()
	v := <-done
	if v.Proceed || v.Decision.Reason != core.ReasonCanceled || !errors.Is(v.Err, context.Canceled) || v.Held <= 0 {
		t.Fatalf("verdict proceed %v reason %v err %v held %v, want canceled after a hold", v.Proceed, v.Decision.Reason, v.Err, v.Held)
	}
	if after := holdBalance(t, l, "leaver"); after < before {
		t.Fatalf("balance %v after the cancel, %v before the hold: the tokens were not given back", after, before)
	}
	if g.Holding() != 0 {
		t.Fatalf("holding %d after the cancel", g.Holding())
	}
}

// A flood of one tenant's requests is held only up to the gate's maximum:
// the rest are answered at once, so goroutines and memory return to where
// they were, and another tenant is neither held nor refused meanwhile.
func TestGateHoldFlood(t *testing.T) {
	const (
		flood    = 5000
		maxHolds = 64
	)
	g, _ := holdGate(t, quota.Quota{Capacity: 10, RefillPerSecond: 100}, time.Second, gate.WithMaxHolds(maxHolds))
	// warm the connection pool and the scripts
	if v := g.Decide(holdCtx("quiet"), holdEndpoint); !v.Proceed {
		t.Fatalf("warm-up: %+v", v)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goBefore, heapBefore := runtime.NumGoroutine(), ms.HeapInuse

	var (
		served, refused, shed, held atomic.Int64
		maxHolding                  atomic.Int64
		wg                          sync.WaitGroup
		start                       = make(chan struct{})
	)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	var goDuring atomic.Int64
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if n := int64(g.Holding()); n > maxHolding.Load() {
				maxHolding.Store(n)
			}
			if n := int64(runtime.NumGoroutine()); n > goDuring.Load() {
				goDuring.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctx := holdCtx("flood")
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v := g.Decide(ctx, holdEndpoint)
			switch {
			case v.Proceed:
				served.Add(1)
				if v.Held > 0 {
					held.Add(1)
				}
			case v.Status == http.StatusTooManyRequests:
				refused.Add(1)
			case v.Decision.Reason == core.ReasonOverloaded:
				// beyond the holds, a check as without them: a flood of
				// one tenant's checks is shed past its share of the queue
				shed.Add(1)
			default:
				t.Errorf("flood request: status %d reason %v err %v", v.Status, v.Decision.Reason, v.Err)
			}
		}()
	}
	close(start)
	// another tenant meanwhile: admitted at once, never held
	var quietMax time.Duration
	for i := range 9 { // with the warm-up, within its capacity of 10
		t0 := time.Now()
		v := g.Decide(holdCtx("quiet"), holdEndpoint)
		quietMax = max(quietMax, time.Since(t0))
		if !v.Proceed || v.Held != 0 {
			t.Errorf("other tenant's request %d during the flood: proceed %v held %v status %d reason %v", i, v.Proceed, v.Held, v.Status, v.Decision.Reason)
		}
	}
	runtime.ReadMemStats(&ms)
	heapDuring := ms.HeapInuse
	wg.Wait()
	close(stop)
	sampler.Wait()

	if served.Load()+refused.Load()+shed.Load() != flood {
		t.Fatalf("served %d + refused %d + shed %d != %d", served.Load(), refused.Load(), shed.Load(), flood)
	}
	if maxHolding.Load() > maxHolds {
		t.Fatalf("held %d at once, above the maximum %d", maxHolding.Load(), maxHolds)
	}
	if held.Load() == 0 {
		t.Fatal("no request of the flood was held")
	}
	// the bucket admits at most capacity + its debt bound (rate x max wait)
	// + refill over the flood: far below the flood
	if served.Load() >= flood/2 {
		t.Fatalf("served %d of %d", served.Load(), flood)
	}
	// goroutines: back to where they were once the flood is answered
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goBefore+2 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d after the flood, %d before", runtime.NumGoroutine(), goBefore)
		}
		time.Sleep(5 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	const slack = 8 << 20
	if ms.HeapInuse > heapBefore+slack {
		t.Fatalf("heap in use %d after the flood, %d before", ms.HeapInuse, heapBefore)
	}
	t.Logf("flood %d: served %d (held %d), refused %d, shed %d; at most %d held at once (max %d); goroutines %d before, %d at most during; heap in use %d KiB before, %d during, %d after; other tenant's slowest request %v",
		flood, served.Load(), held.Load(), refused.Load(), shed.Load(), maxHolding.Load(), maxHolds, goBefore, goDuring.Load(), heapBefore>>10, heapDuring>>10, ms.HeapInuse>>10, quietMax)
}

// A held request's decision is counted once, and its hold in the hold
// histogram; a request admitted at once or refused is not a hold.
func TestGateHoldMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"default": {Capacity: 1, RefillPerSecond: 20}}}}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, redistest.Client(t), res, core.WithMeterProvider(mp))
	g, err := gate.New(l, gate.WithHold("default", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := holdCtx("m")
	for i := range 3 { // at once, held, held
		if v := g.Decide(ctx, holdEndpoint); !v.Proceed || (i > 0) != (v.Held > 0) {
			t.Fatalf("request %d: proceed %v held %v", i, v.Proceed, v.Held)
		}
	}
	// cost 100 is above the capacity: refused, not held
	if v := g.Decide(ctx, gate.Endpoint{Pattern: "/x", Route: gate.Route{Class: "default", Cost: 100}}); v.Proceed || v.Held != 0 {
		t.Fatalf("cost above capacity: %+v", v)
	}
	if got := collect(t, reader, "tollgate.decisions", "outcome")["allowed"]; got != 3 {
		t.Fatalf("allowed decisions %d, want 3 (each held request counted once)", got)
	}
	if n := histogramCount(t, reader, "tollgate.hold.duration"); n != 2 {
		t.Fatalf("holds recorded %d, want 2", n)
	}
}

// A class with a concurrency limit is not held: it is checked, its slot
// taken and released, as without WithHold.
func TestGateHoldConcurrencyClassChecked(t *testing.T) {
	g, _ := holdGate(t, quota.Quota{Capacity: 10, RefillPerSecond: 10, Concurrency: 1}, time.Second)
	ctx := holdCtx("slots")
	v := g.Decide(ctx, holdEndpoint)
	if !v.Proceed || v.Decision.Slot == nil || v.Held != 0 {
		t.Fatalf("first: proceed %v slot %v held %v err %v", v.Proceed, v.Decision.Slot, v.Held, v.Err)
	}
	w := g.Decide(ctx, holdEndpoint)
	if w.Proceed || w.Status != http.StatusTooManyRequests || w.Held != 0 {
		t.Fatalf("second while the slot is held: status %d held %v err %v, want 429", w.Status, w.Held, w.Err)
	}
	v.Done()
}

// A class in shadow mode is never held: its would-be wait is let through
// at once, as a check's would-be denial is.
func TestGateHoldShadowNotHeld(t *testing.T) {
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"default": {Capacity: 1, RefillPerSecond: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, redistest.Client(t), res, core.WithShadowClasses("default"))
	g, err := gate.New(l, gate.WithHold("default", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := holdCtx("shadow")
	if v := g.Decide(ctx, holdEndpoint); !v.Proceed || v.Held != 0 {
		t.Fatalf("first: %+v", v)
	}
	v := g.Decide(ctx, holdEndpoint)
	if !v.Proceed || v.Held != 0 || v.Decision.Reason != core.ReasonShadowDenied {
		t.Fatalf("second: proceed %v held %v reason %v, want let through at once as shadow_denied", v.Proceed, v.Held, v.Decision.Reason)
	}
}
