package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestFloodedQueueServesOtherTenants: while the batches on the wire are
// held (Redis paused), a flooding tenant queues at most its share (512) of
// the waiting checks and the rest of its flood is shed at once
// (ReasonOverloaded, cause tenant_share, never admitted); a calm tenant's
// check still queues and is admitted once Redis answers. (The order the
// queue serves tenants in is TestFairQueueRoundRobin's.)
func TestFloodedQueueServesOtherTenants(t *testing.T) {
	// the two checks on the wire must stay there (Redis paused) until the
	// test resumes it: their timeout is far past every wait below (5 s), or
	// on a busy machine their pipelines come back before the flood is in,
	// the queue leaves as the next batch, and later flood checks queue
	// instead of being shed
	const hold = 60 * time.Second
	srv := redistest.NewServer(t)
	reader := sdkmetric.NewManualReader()
	l := newLimiter(t, srv.Client(t, func(o *redis.Options) { o.PoolSize = 8 }),
		staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1000)}),
		core.WithBatching(true), core.WithTimeout(hold), core.WithCircuitBreaker(0, 0),
		core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	check(t, l, "warm", 0)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	ctx := context.Background()
	var wg sync.WaitGroup
	var shed, wrongShed atomic.Int64
	flooder := func() {
		d, err := l.Allow(ctx, quota.Tenant{ID: "flood"}, "default", 1)
		if d.Reason == core.ReasonOverloaded {
			if d.Allowed || !errors.Is(err, core.ErrOverloaded) || errors.Is(err, core.ErrStore) {
				wrongShed.Add(1)
			}
			shed.Add(1)
		}
	}
	// two checks take the two pipelines in flight, and hang (every check
	// of the tenant is counted alike: 2 on the wire, 512 queued, the rest
	// shed)
	for range 2 {
		wg.Go(flooder)
	}
	// both are on the wire once the batcher has counted their round trips
	// (it counts one when it takes a pipeline, before it sends): the warm-up
	// check's, then these two
	waitUntil(t, "the two hanging checks on the wire", func() bool { return roundTrips(t, reader) >= 3 })
	const inFlight, flood, share = 2, 800, 512
	for range flood {
		wg.Go(flooder)
	}
	const wantShed = inFlight + flood - 2 - share
	waitUntil(t, "the flooder's excess shed", func() bool { return shed.Load() >= wantShed })
	var calm core.Decision
	wg.Go(func() { calm, _ = l.Allow(ctx, quota.Tenant{ID: "calm"}, "default", 1) })
	time.Sleep(100 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if shed.Load() != wantShed || wrongShed.Load() != 0 {
		t.Fatalf("%d of %d flood checks shed (%d wrongly answered), want exactly %d: 2 on the wire, the tenant's share of %d queued", shed.Load(), inFlight+flood, wrongShed.Load(), wantShed, share)
	}
	if got := collect(t, reader, "tollgate.checks.shed", "cause")["tenant_share"]; got != wantShed {
		t.Fatalf("tenant_share counted %d, want %d", got, wantShed)
	}
	if calm.Reason != core.ReasonOK {
		t.Fatalf("the calm tenant: %v", calm.Reason)
	}
}

// roundTrips is how many round trips the batcher has counted
// (tollgate.batch.size's count).
func roundTrips(t *testing.T, r *sdkmetric.ManualReader) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == "tollgate.batch.size" {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting: %s", what)
}
