package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The flood scenario: one tenant on floodWorkers goroutines, each a client
// connection that sends its next request floodPause after the answer to
// the last (up to 120,000 checks a second offered, some 60,000 times the
// flooder's rate; under the race detector, which slows the process about
// tenfold, 12,000), while a calm tenant sends calmRate checks a second.
// (make test runs this beside other packages' tests on two cores: the
// pause leaves the limiter the CPU to serve the calm tenant there too.)
// A goroutine that never blocks is not a client: a server's request
// goroutine waits on its connection between requests. The flood's
// goroutines share the process's two cores with the limiter: offered much
// faster, they starve it of CPU, and a process that cannot run its own
// goroutines for longer than the probe's deadline can read its starvation
// as the store's silence (docs/reliability.md).
const (
	floodWorkers = 3000
	calmRate     = 100
	floodFor     = 2 * time.Second
)

var floodPause = map[bool]time.Duration{false: 25 * time.Millisecond, true: 250 * time.Millisecond}[raceEnabled]

var (
	floodQuota = quota.Quota{Capacity: 20, RefillPerSecond: 2}
	// the calm tenant's quota admits all it sends: every shed or degraded
	// answer shows as a missing admission
	calmQuota = quota.Quota{Capacity: 100, RefillPerSecond: 2 * calmRate}
)

// calmTally is what the calm tenant got.
type calmTally struct {
	sent, admitted atomic.Int64
	mu             sync.Mutex
	other          map[core.Reason]int // answers other than an admission
	errs           []string            // the first few errors
}

// sendCalm sends calmRate checks a second for d, each on its own goroutine
// (as a server runs each request), on a fixed schedule, and waits for every
// answer.
func sendCalm(lim *core.Limiter, d time.Duration) *calmTally {
	tally := &calmTally{other: map[core.Reason]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	n := int(d.Seconds() * calmRate)
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / calmRate)))
		tally.sent.Add(1)
		wg.Go(func() {
			dec, err := lim.Allow(context.Background(), quota.Tenant{ID: "calm"}, "default", 1)
			if dec.Allowed {
				tally.admitted.Add(1)
				return
			}
			tally.mu.Lock()
			if len(tally.errs) < 5 {
				tally.errs = append(tally.errs, fmt.Sprint(err)) // a denial has no error
			}
			tally.other[dec.Reason]++
			tally.mu.Unlock()
		})
	}
	wg.Wait()
	return tally
}

// TestFloodOfOneTenant: one tenant's flood, with Redis healthy, never turns
// limiting off. The flooding tenant is admitted at most its bucket's bound
// (its excess is denied or shed, never failed open); nothing is counted as
// a store failure and the breaker never opens; the calm tenant is never
// answered by the failure policy (no 503 of fail-closed, no unchecked pass)
// nor admitted above its bound. How much of the calm tenant's traffic is
// admitted, rather than shed, depends on the CPU the process has left (the
// flood's goroutines run in it, and make test runs other packages beside
// it): it is logged, docs/reliability.md gives the measured figures, and
// the fair queue that gives it its turn is tested where no CPU starvation
// blurs it (TestFairQueueRoundRobin, TestFloodedQueueServesOtherTenants).
func TestFloodOfOneTenant(t *testing.T) {
	variants := []struct {
		name string
		opts []core.Option
	}{
		{"batched", []core.Option{core.WithBatching(true)}},
		{"direct", []core.Option{core.WithBatching(false)}},
	}
	for _, v := range variants {
		for _, p := range policies {
			t.Run(v.name+"/"+p.String(), func(t *testing.T) {
				srv := redistest.NewServer(t)
				// the premise is a healthy Redis: the flood starves this process, not the store
				if err := srv.Favor(); err != nil {
					t.Logf("the private Redis runs at the test's priority: %v", err)
				}
				reader := sdkmetric.NewManualReader()
				r := quota.ResolverFunc(func(_ context.Context, tn quota.Tenant, _ string) ([]quota.Bucket, error) {
					if tn.ID == "calm" {
						return []quota.Bucket{{Name: "default", Quota: calmQuota}}, nil
					}
					return []quota.Bucket{{Name: "default", Quota: floodQuota}}, nil
				})
				// the defaults: 100 ms timeout, breaker 5 failures / 1 s
				lim, err := core.New(srv.Client(t), r, append([]core.Option{core.WithPrefix(redistest.Prefix(t)),
					core.WithFailurePolicy(p), core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}, v.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = lim.Close() })

				base := sendCalm(lim, floodFor)
				if _, err := lim.Reset(context.Background(), quota.Tenant{ID: "calm"}); err != nil {
					t.Fatal(err)
				}

				var admitted, shed, failedOpen atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				start := time.Now()
				for range floodWorkers {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							time.Sleep(floodPause)
							d, err := lim.Allow(context.Background(), quota.Tenant{ID: "flood"}, "default", 1)
							switch {
							case d.Reason == core.ReasonFailedOpen:
								failedOpen.Add(1)
							case d.Allowed:
								admitted.Add(1)
							case d.Reason == core.ReasonOverloaded:
								if !errors.Is(err, core.ErrOverloaded) || errors.Is(err, core.ErrStore) {
									t.Errorf("a shed check's error: %v", err)
								}
								shed.Add(1)
							}
						}
					})
				}
				calm := sendCalm(lim, floodFor)
				close(stop)
				wg.Wait()
				elapsed := time.Since(start)

				bound := float64(floodQuota.Capacity) + floodQuota.RefillPerSecond*elapsed.Seconds()
				t.Logf("flood: %d admitted (bound %.1f), %d shed, %d failed open in %v; calm: %d of %d admitted alone, %d of %d in the flood, others %v",
					admitted.Load(), bound, shed.Load(), failedOpen.Load(), elapsed.Round(time.Millisecond),
					base.admitted.Load(), base.sent.Load(), calm.admitted.Load(), calm.sent.Load(), calm.other)
				if len(calm.errs) > 0 {
					t.Logf("calm errors: %q", calm.errs)
				}
				if failedOpen.Load() != 0 || float64(admitted.Load()) > bound {
					t.Errorf("the flooding tenant got %d admissions and %d unchecked passes, bound %.1f", admitted.Load(), failedOpen.Load(), bound)
				}
				calmBound := float64(calmQuota.Capacity) + calmQuota.RefillPerSecond*elapsed.Seconds()
				if float64(calm.admitted.Load()) > calmBound {
					t.Errorf("the calm tenant got %d admissions, bound %.1f", calm.admitted.Load(), calmBound)
				}
				if n := calm.other[core.ReasonFailedClosed] + calm.other[core.ReasonFailedOpen] + calm.other[core.ReasonCanceled]; n != 0 {
					t.Errorf("the calm tenant got %d degraded answers: %v", n, calm.other)
				}
				if _, err := lim.Allow(context.Background(), quota.Tenant{ID: "after"}, "default", 0); err != nil {
					t.Errorf("after the flood: %v", err)
				}
				if errs := storeErrors(t, reader); len(errs) != 0 {
					t.Errorf("store errors counted during a flood on a healthy Redis: %v", errs)
				}
				record(row{"one tenant floods (" + v.name + ", 3,000 goroutines), Redis healthy", p,
					"flooder admitted within its bound, its excess denied or shed (503 overloaded), never failed open; the other tenant never degraded nor over its bound; no store error, breaker closed", 0})
			})
		}
	}
}
