package faults_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestLeaseMapOverflow: with leases on, a stream of 210,000 new tenants
// meets the lease map's bound (100,000 bucket sets) while a hot tenant's
// checks are taking leases and others wait for them. No check outlives the
// check timeout (waiters used to stay blocked until their own context
// ended: forever without a deadline), no hot tenant is admitted more than
// the token-bucket bound, and a victim's live lease is never dropped to
// make room: its unspent tokens are spent locally after the flood, and the
// store was charged one lease (the map used to be emptied at the bound,
// burning them).
func TestLeaseMapOverflow(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 210,000 new tenants")
	}
	srv := redistest.NewServer(t)
	lim := newLimiter(t, srv.Client(t), core.FailClosed, core.WithLeases("default", 5, time.Second), core.WithBatching(true),
		core.WithDenyCache(false),                    // every lease acquisition is a store call, in flight when the map is full
		core.WithLeases("export", 5, 10*time.Minute)) // the victim's lease outlives the flood (70 s under the race detector)
	// the victim's first check is plain (no demand known yet); its second,
	// at once, takes a lease of 5 before the flood and spends 1 of it
	victim := quota.Tenant{ID: "victim"}
	for i := range 2 {
		if d, err := lim.Allow(context.Background(), victim, "export", 1); err != nil || !d.Allowed || d.Local {
			t.Fatalf("the victim's check %d: %+v, %v", i+1, d, err)
		}
	}
	const hot, newTenants = 1, 210_000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		worst    time.Duration
		slow     []string
		admitted = map[string]int{}
		reasons  = map[core.Reason]int{}
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for w := range 8 { // the hot tenant: one check takes a lease, the others wait for it
		wg.Go(func() {
			repeat(stop, func(i int) {
				tenant := "hot" + strconv.Itoa((w+i)%hot)
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second) // a hang shows as 5 s, not forever
				start := time.Now()
				d, _ := lim.Allow(cctx, quota.Tenant{ID: tenant}, "default", 1)
				took := time.Since(start)
				ccancel()
				mu.Lock()
				worst = max(worst, took)
				if took > 150*time.Millisecond {
					slow = append(slow, d.Reason.String()+"/"+took.Round(time.Millisecond).String())
				}
				reasons[d.Reason]++
				if d.Allowed {
					admitted[tenant]++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // a steady, bounded load
			})
		})
	}
	began := time.Now()
	var next atomic.Int64
	var fill sync.WaitGroup
	for range 4 { // the flood of new tenants
		fill.Go(func() {
			for {
				n := next.Add(1)
				if n > newTenants || ctx.Err() != nil {
					return
				}
				_, _ = lim.Allow(ctx, quota.Tenant{ID: "new" + strconv.FormatInt(n, 10)}, "default", 1)
			}
		})
	}
	fill.Wait()
	close(stop)
	wg.Wait()
	elapsed := time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("the flood did not finish in time")
	}
	t.Logf("%d new tenants in %v; hot tenants' worst check %v; %v; over 150ms: %v", newTenants, elapsed, worst, reasons, slow)
	if worst > latencyBound {
		t.Fatalf("a check took %v while the lease map overflowed (timeout 100ms)", worst)
	}
	// the victim's 4 unspent leased tokens survived the full map: spent
	// locally, and the store was charged the plain check and the one lease
	// of 5, not a second
	for i := range 4 {
		if d, err := lim.Allow(context.Background(), victim, "export", 1); err != nil || !d.Allowed || !d.Local {
			t.Fatalf("the victim's leased token %d after the flood: allowed %v local %v, %v (the lease was dropped)", i+1, d.Allowed, d.Local, err)
		}
	}
	if d, err := lim.Peek(context.Background(), victim, "export"); err != nil || d.Tokens > float64(slowQuota.Capacity-6)+slowQuota.RefillPerSecond*time.Since(began).Seconds()+1 ||
		d.Tokens < float64(slowQuota.Capacity-6) {
		t.Fatalf("the victim's bucket holds %.1f tokens after a plain check and one lease of 5: %v", d.Tokens, err)
	}
	bound := float64(slowQuota.Capacity) + slowQuota.RefillPerSecond*elapsed.Seconds()
	for tenant, n := range admitted {
		if float64(n) > bound {
			t.Errorf("tenant %s admitted %d in %v, bound %.1f", tenant, n, elapsed, bound)
		}
	}
	record(row{"lease map overflowing under load (210,000 new tenants, a hot tenant leasing)", core.FailClosed,
		"a full map never strands a lease's waiters nor drops a live lease (a victim's unspent tokens survive); no check outlives the timeout; accounting holds", worst})
}
