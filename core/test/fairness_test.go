package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestFloodedQueueServesOtherTenants: while the batches on the wire are
// held (Redis paused), a flooding tenant queues at most its share (128) of
// the waiting checks and the rest of its flood is shed at once
// (ReasonOverloaded, cause tenant_share, never admitted); a calm tenant's
// check still queues and is admitted once Redis answers. (The order the
// queue serves tenants in is TestFairQueueRoundRobin's.)
func TestFloodedQueueServesOtherTenants(t *testing.T) {
	srv := redistest.NewServer(t)
	reader := sdkmetric.NewManualReader()
	l := newLimiter(t, srv.Client(t, func(o *redis.Options) { o.PoolSize = 8 }),
		staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1000)}),
		core.WithBatching(true), core.WithTimeout(3*time.Second), core.WithCircuitBreaker(0, 0),
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
	// two checks take the two pipelines in flight, and hang; on a busy
	// machine one may not be on the wire yet when the flood starts, and a
	// flood check takes its place: every check of the tenant is counted
	// alike, so the tally is the same either way (2 on the wire, 128
	// queued, the rest shed)
	for range 2 {
		wg.Go(flooder)
	}
	time.Sleep(200 * time.Millisecond)
	const inFlight, flood = 2, 300
	for range flood {
		wg.Go(flooder)
	}
	const wantShed = inFlight + flood - 2 - 128
	waitUntil(t, "the flooder's excess shed", func() bool { return shed.Load() >= wantShed })
	var calm core.Decision
	wg.Go(func() { calm, _ = l.Allow(ctx, quota.Tenant{ID: "calm"}, "default", 1) })
	time.Sleep(100 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if shed.Load() != wantShed || wrongShed.Load() != 0 {
		t.Fatalf("%d of %d flood checks shed (%d wrongly answered), want exactly %d: 2 on the wire, the tenant's share of 128 queued", shed.Load(), inFlight+flood, wrongShed.Load(), wantShed)
	}
	if got := collect(t, reader, "tollgate.checks.shed", "cause")["tenant_share"]; got != wantShed {
		t.Fatalf("tenant_share counted %d, want %d", got, wantShed)
	}
	if calm.Reason != core.ReasonOK {
		t.Fatalf("the calm tenant: %v", calm.Reason)
	}
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
