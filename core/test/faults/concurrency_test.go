package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

// TestConcurrencyStoreDown: a slot is held when Redis hangs (SIGSTOP) or
// dies. Checks of the class answer by the failure policy and take no
// slot; the holder's release returns within the check timeout; once Redis
// is back, the slot is free again within the lease (released, reclaimed at
// its deadline, or gone with the killed server) and the limit holds.
func TestConcurrencyStoreDown(t *testing.T) {
	const timeout, lease = 200 * time.Millisecond, 1500 * time.Millisecond
	q := core.Quota{Capacity: 1000, RefillPerSecond: 100, Concurrency: 1}
	for _, fault := range []string{"hung (SIGSTOP), then resumed", "killed, restarted"} {
		for _, p := range policies {
			t.Run(fault+"/"+p.String(), func(t *testing.T) {
				srv := redistest.NewServer(t)
				c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
				lim, err := core.New(c, resolver(q), core.WithPrefix(redistest.Prefix(t)), core.WithFailurePolicy(p),
					core.WithTimeout(timeout), core.WithCircuitBreaker(0, 0), core.WithConcurrencySlots(lease, 0))
				if err != nil {
					t.Fatal(err)
				}
				defer lim.Close()
				ctx := context.Background()
				req := core.Request{Tenant: core.Tenant{ID: "t1"}, Class: "default", Cost: 1}
				held, err := lim.Check(ctx, req)
				if err != nil || held.Slot == nil {
					t.Fatalf("before the fault: %v, %v", held.Reason, err)
				}
				if fault[0] == 'h' {
					err = srv.Pause()
				} else {
					srv.Kill()
				}
				if err != nil {
					t.Fatal(err)
				}
				var worst time.Duration
				want := core.ReasonFailedOpen
				if p == core.FailClosed {
					want = core.ReasonFailedClosed
				}
				for range 3 {
					start := time.Now()
					d, _ := lim.Check(ctx, req)
					worst = max(worst, time.Since(start))
					if d.Reason != want || d.Slot != nil {
						t.Fatalf("while Redis is down: %v, slot %v; want %v without a slot", d.Reason, d.Slot, want)
					}
				}
				start := time.Now()
				held.Slot.Release()
				if took := time.Since(start); took > 3*timeout+time.Second {
					t.Fatalf("release took %v while Redis was down; want about the timeout %v", took, timeout)
				}
				if fault[0] == 'h' {
					err = srv.Resume()
				} else {
					err = srv.Restart()
				}
				if err != nil {
					t.Fatal(err)
				}
				var again core.Decision
				deadline := time.Now().Add(2*lease + 10*timeout)
				for {
					if again, _ = lim.Check(ctx, req); again.Slot != nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the slot not free %v after Redis came back: %v", 2*lease+10*timeout, again.Reason)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if d, err := lim.Check(ctx, req); err != nil || d.Reason != core.ReasonConcurrencyLimit {
					t.Fatalf("a second request beside the one holding the slot: %v, %v; want a concurrency denial", d.Reason, err)
				}
				again.Slot.Release()
				t.Logf("worst check latency while down: %v", worst.Round(time.Millisecond))
				record(row{"concurrency slot held, Redis " + fault, p, policyAnswer(p) + " without a slot while down; the holder's release returns within the timeout; the slot free again within the lease once Redis is back, and the limit enforced", worst})
			})
		}
	}
}
