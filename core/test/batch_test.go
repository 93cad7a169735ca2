package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestBatchingAtomicity: the design's concurrency property holds with
// batching on, on a standalone server and a Cluster, and many checks share
// round trips.
func TestBatchingAtomicity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		const capacity, rate, total, workers = 10, 2.0, 500, 50
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: capacity, RefillPerSecond: rate}}),
			core.WithBatching(true))
		defer l.Close()
		var admitted, next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= total {
					// many tenants too, so batches span slots and nodes
					tenant := "hot"
					if next.Load()%2 == 0 {
						tenant = "t" + string(rune('a'+next.Load()%20))
					}
					d, err := l.Allow(context.Background(), quota.Tenant{ID: tenant}, "default", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed && tenant == "hot" {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		bound := capacity + rate*time.Since(start).Seconds()
		if a := float64(admitted.Load()); a > bound || a == 0 {
			t.Fatalf("admitted %v on the hot key, want 0 < admitted <= %.2f", a, bound)
		}
	})
}

// TestBatchingScriptFlush: NOSCRIPT inside a pipeline is recovered by
// loading the script and resending only the commands that were not run.
func TestBatchingScriptFlush(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1000, RefillPerSecond: 0.001}}), core.WithBatching(true))
		defer l.Close()
		ctx := context.Background()
		check(t, l, "t1", 1)
		flushScripts(t, c)
		var wg sync.WaitGroup
		var allowed atomic.Int64
		for range 20 {
			wg.Go(func() {
				d, err := l.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 1)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		// each command ran exactly once: 1 + 20 charged
		if d := check(t, l, "t1", 0); allowed.Load() != 20 || d.Remaining != 1000-21 {
			t.Fatalf("after SCRIPT FLUSH: %d allowed, %d remaining; want 20, 979", allowed.Load(), d.Remaining)
		}
	})
}

func TestBatchingClose(t *testing.T) {
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(10)}),
		core.WithBatching(true), core.WithFailurePolicy(core.FailClosed))
	check(t, l, "t1", 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
	if !errors.Is(err, core.ErrStore) || d.Reason != core.ReasonFailedClosed {
		t.Fatalf("after Close: %+v, %v", d, err)
	}
}
