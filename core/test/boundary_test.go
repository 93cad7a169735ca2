package core_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestCallerGoneIsNotAStoreFailure: checks whose caller already left (a
// cancelled context, a deadline already past, a deadline too short for the
// round trip) report the caller's error, are not degraded decisions, log
// nothing, and never open the circuit breaker for everyone else.
func TestCallerGoneIsNotAStoreFailure(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		var logs testkit.LogBuffer
		l := v.newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1000)}),
			core.WithCircuitBreaker(3, time.Hour), core.WithFailurePolicy(core.FailClosed),
			core.WithTimeout(time.Second), core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		check(t, l, "victim", 0) // warm the connection and the script cache
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		for i := range 20 {
			for _, c := range []struct {
				ctx  context.Context
				want error
			}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
				d, err := l.Allow(c.ctx, quota.Tenant{ID: "attacker"}, "default", 1)
				if errors.Is(err, core.ErrStore) || !errors.Is(err, c.want) {
					t.Fatalf("check %d: err %v, want the caller's %v and no store failure", i, err, c.want)
				}
				if d.Allowed || d.Degraded() || d.Reason != core.ReasonCanceled {
					t.Fatalf("check %d: %+v, want a canceled, not degraded, not allowed decision", i, d)
				}
			}
			// a deadline that passes during the round trip
			short, cancel3 := context.WithTimeout(context.Background(), 50*time.Microsecond)
			d, err := l.Allow(short, quota.Tenant{ID: "attacker"}, "default", 1)
			cancel3()
			if errors.Is(err, core.ErrStore) || d.Degraded() {
				t.Fatalf("short deadline %d: %+v, %v: a caller's deadline is not a store failure", i, d, err)
			}
		}
		d := check(t, l, "victim", 1)
		if d.Reason != core.ReasonOK {
			t.Fatalf("victim after the storm: %+v: the breaker opened", d)
		}
		if s := logs.String(); s != "" {
			t.Fatalf("a caller leaving is not a degraded decision, yet logged: %s", s)
		}
	})
}

// TestRequestErrorIsThatRequestsFailure: a key of the wrong type for one
// tenant fails that tenant's checks by the failure policy, logged with the
// escaped tenant and key, and never opens the breaker for other tenants.
func TestRequestErrorIsThatRequestsFailure(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		var logs testkit.LogBuffer
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1000)}),
			core.WithCircuitBreaker(3, time.Hour), core.WithFailurePolicy(core.FailClosed),
			core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		const bad = "poisoned\ttenant"
		key, err := l.Keys().Bucket(bad, "default")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SAdd(context.Background(), key, "x").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Del(context.Background(), key) })
		for i := range 10 {
			d, err := l.Allow(context.Background(), quota.Tenant{ID: bad}, "default", 1)
			if !errors.Is(err, core.ErrStore) || !strings.Contains(err.Error(), "WRONGTYPE") || d.Reason != core.ReasonFailedClosed {
				t.Fatalf("poisoned check %d: %+v, %v; want the failure policy and the WRONGTYPE error", i, d, err)
			}
		}
		// ten consecutive poisoned checks, over a threshold of three
		if d := check(t, l, "other", 1); d.Reason != core.ReasonOK {
			t.Fatalf("another tenant after the poisoned checks: %+v: the breaker opened", d)
		}
		s := logs.String()
		if !strings.Contains(s, keys.EscapeID(bad)) || !strings.Contains(s, "key=") || strings.Contains(s, "circuit") {
			t.Fatalf("want a log naming the escaped tenant and the key, no breaker: %s", s)
		}
	})
}

// TestBreakerOneClock: the breaker opens and cools down on the injected
// clock alone, never the wall clock.
func TestBreakerOneClock(t *testing.T) {
	srv := redistest.NewServer(t)
	clock := testkit.NewFakeClock()
	clock.Set(time.Now().Add(-time.Hour)) // an hour behind the wall clock
	l, err := core.New(srv.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(10)}),
		core.WithPrefix(redistest.Prefix(t)), core.WithClock(clock.Now), core.WithFailurePolicy(core.FailClosed),
		core.WithCircuitBreaker(2, time.Hour), core.WithTimeout(time.Second), core.WithBatching(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	srv.Stop()
	ctx := context.Background()
	for range 2 {
		if _, err := l.Allow(ctx, quota.Tenant{ID: "t"}, "default", 1); !errors.Is(err, core.ErrStore) {
			t.Fatalf("Redis down: %v", err)
		}
	}
	if _, err := l.Allow(ctx, quota.Tenant{ID: "t"}, "default", 1); err == nil || !strings.Contains(err.Error(), "circuit breaker open") {
		t.Fatalf("want the circuit open: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + time.Second) // the cool-down passed on the limiter's clock
	// the failed calls left no pooled connection: the probe dials afresh
	d, err := l.Allow(ctx, quota.Tenant{ID: "t"}, "default", 1)
	if err != nil || d.Reason != core.ReasonOK {
		t.Fatalf("after the cool-down on the injected clock: %+v, %v", d, err)
	}
}

// TestNoGoroutinePerCheck: with a client that ignores context deadlines
// (no ContextTimeoutEnabled, a long ReadTimeout) and a hung Redis, checks
// still end at the limiter's timeout, and leave no goroutine behind them
// waiting for the client's read timeout.
func TestNoGoroutinePerCheck(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second; o.PoolSize = 64 })
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(10)}),
			core.WithTimeout(100*time.Millisecond), core.WithCircuitBreaker(0, 0))
		check(t, l, "warm", 0)
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Resume() })
		before := runtime.NumGoroutine()
		var wg sync.WaitGroup
		var slow atomic.Int64
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := l.Allow(context.Background(), quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1)
				// the store's failure, or a shed (a loaded machine's
				// batcher may hold a check in its queue past the
				// timeout): either way the check ended, at its timeout
				if !(errors.Is(err, core.ErrStore) || errors.Is(err, core.ErrOverloaded)) || time.Since(start) > 2*time.Second {
					slow.Add(1)
					t.Logf("check %d: %v after %v", i, err, time.Since(start))
				}
			}()
		}
		wg.Wait()
		if slow.Load() != 0 {
			t.Fatalf("%d checks did not fail within the timeout", slow.Load())
		}
		// a goroutine left per check would wait out the 10s read timeout;
		// allow 2s for the ones that are merely ending (closed sockets,
		// finished calls) on a busy machine
		after := runtime.NumGoroutine()
		for deadline := time.Now().Add(2 * time.Second); after > before+10 && time.Now().Before(deadline); after = runtime.NumGoroutine() {
			time.Sleep(20 * time.Millisecond)
		}
		if after > before+10 {
			t.Fatalf("%d goroutines before the checks, %d 2s after they all returned: calls left running", before, after)
		}
	})
}

// TestBatcherQueueBounded: when Redis hangs, the batcher queues at most its
// bound; the checks that do not fit are shed at once (ReasonOverloaded,
// never admitted, never a store failure), counted as shed by queue_full.
func TestBatcherQueueBounded(t *testing.T) {
	srv := redistest.NewServer(t)
	reader := sdkmetric.NewManualReader()
	l := newLimiter(t, srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }),
		staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(10)}),
		core.WithBatching(true), core.WithTimeout(3*time.Second),
		core.WithCircuitBreaker(0, 0), core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	check(t, l, "warm", 0)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	const n = 2500 // over the bound (2048 queued, 2 in flight)
	var wg sync.WaitGroup
	var full, fast atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			d, err := l.Allow(context.Background(), quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1)
			if errors.Is(err, core.ErrOverloaded) && strings.Contains(err.Error(), "too many checks waiting") {
				if d.Allowed || d.Reason != core.ReasonOverloaded || errors.Is(err, core.ErrStore) {
					t.Errorf("a shed check answered %+v, %v", d, err)
				}
				full.Add(1)
				if time.Since(start) < time.Second {
					fast.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	_ = srv.Resume()
	wg.Wait()
	if full.Load() < n-2048-2-50 || fast.Load() != full.Load() {
		t.Fatalf("%d of %d checks found the queue full (%d at once); want about %d, all at once", full.Load(), n, fast.Load(), n-2050)
	}
	if got := collect(t, reader, "tollgate.checks.shed", "cause")["queue_full"]; got != full.Load() {
		t.Fatalf("queue_full counted %d times, want %d", got, full.Load())
	}
	if got := collect(t, reader, "tollgate.store.errors", "kind")["queue_full"]; got != 0 {
		t.Fatalf("a full queue counted %d times as a store error", got)
	}
}
