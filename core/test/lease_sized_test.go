package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
)

// TestLeaseShrinksToPlainNearEmpty: one replica drains a bucket of 40
// without refill. Its leases shrink with the balance the store reports
// (never more than half of it), then its checks are plain: exactly 40
// admitted, the last ones by the store, and one script call per check not
// answered from a lease (no lease is refused, so no check pays two).
func TestLeaseShrinksToPlainNearEmpty(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		ctx := context.Background()
		if err := c.ScriptLoad(ctx, lua.TokenBucket()).Err(); err != nil {
			t.Fatal(err)
		}
		clock := testkit.NewFakeClock()
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 40, RefillPerSecond: 0.001}}),
			core.WithClock(clock.Now), core.WithLeases("default", 10, time.Minute))
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var admitted, stored int64
		var trail []bool // Local of each admission
		for range 60 {
			d := check(t, l, "t1", 1)
			if !d.Allowed {
				if d.Local {
					t.Fatalf("denial answered locally: %+v", d)
				}
				break
			}
			admitted++
			trail = append(trail, d.Local)
			if !d.Local {
				stored++
			}
		}
		calls := scriptCalls(t, c)
		t.Logf("admitted %d, %d of them by a store call; %d script calls; local trail %v", admitted, stored, calls, trail)
		if admitted != 40 {
			t.Fatalf("admitted %d from a bucket of 40", admitted)
		}
		for _, local := range trail[len(trail)-3:] {
			if local {
				t.Fatalf("near empty an admission came from a lease: %v", trail)
			}
		}
		if stored >= admitted/2 {
			t.Fatalf("%d of %d admissions by a store call: the leases did not cut calls far from empty", stored, admitted)
		}
		if calls != stored+1 {
			t.Fatalf("%d script calls for %d store admissions and one denial", calls, stored)
		}
	})
}

// TestLeaseLowDemandSmallLeases: a tenant at 3 requests a second, with
// leases of at most 10 for 1 s, takes leases of about its demand: over 10 s
// the tokens charged beyond those admitted (lost at expiry) stay within one
// lease's rounding, where fixed leases of 10 lost 7 of every 10. A hot
// tenant on the same limiter still takes leases of 10.
func TestLeaseLowDemandSmallLeases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		clock := testkit.NewFakeClock()
		const capacity = 1000
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: capacity, RefillPerSecond: 0.001}}),
			core.WithClock(clock.Now), core.WithLeases("default", 10, time.Second))
		start := clock.Now()
		var admitted, local int64
		for range 30 {
			d := check(t, l, "quiet", 1)
			if !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
			admitted++
			if d.Local {
				local++
			}
			clock.Advance(time.Second / 3)
		}
		clock.Advance(2 * time.Second) // every lease expired: what is unspent is lost
		p := check(t, l, "quiet", 0)
		charged := capacity + 0.001*clock.Now().Sub(start).Seconds() - p.Tokens
		lost := charged - float64(admitted)
		t.Logf("quiet tenant: %d admitted (%d from leases), %.3f tokens charged, %.3f lost at expiry", admitted, local, charged, lost)
		if local < admitted/2 {
			t.Fatalf("only %d of %d admissions from leases", local, admitted)
		}
		if lost > 3+1e-6 || lost < -1e-6 {
			t.Fatalf("%.3f tokens lost at expiry, want 0 to 3", lost)
		}
		// a hot tenant: 101 checks at one instant take a plain check and
		// leases of 10
		for range 101 {
			check(t, l, "hot", 1)
		}
		if p := check(t, l, "hot", 0); !near(p.Tokens, capacity-101, 0.01) {
			t.Fatalf("hot tenant: %v tokens in the store after 101 checks, want %v (leases of 10, all spent)", p.Tokens, capacity-101)
		}
	})
}

// The lease fleet test's replicas: this test binary with fleetRole
// "lease" runs runLeaseReplica.
const (
	leaseFleetStart = "TOLLGATE_LEASE_START" // Unix nanoseconds: send from then
	leaseFleetStop  = "TOLLGATE_LEASE_STOP"  // ... until then
)

// leaseFleetQuota is the fleet's one bucket: small beside the fleet's demand.
var leaseFleetQuota = quota.Quota{Capacity: 100, RefillPerSecond: 200}

const leaseFleetSize = 10 // the largest lease

type leaseReplicaResult struct {
	Requests, Admitted, Local, Errors int64
	Last                              int64 // Unix nanoseconds: the last answer
}

// runLeaseReplica is a replica process of TestLeasesFleetBound: a limiter
// with leases, and 16 goroutines sending requests of tenant t1 between
// the start and stop times, as fast as they are answered.
func runLeaseReplica() int {
	client := fleetClient(os.Getenv)
	defer client.Close()
	lim, err := core.New(client, staticResolver(quota.Bucket{Name: "default", Quota: leaseFleetQuota}),
		core.WithPrefix(os.Getenv(fleetPrefix)), core.WithTimeout(2*time.Second), core.WithLeases("default", leaseFleetSize, time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	at := func(name string) time.Time {
		n, _ := strconv.ParseInt(os.Getenv(name), 10, 64)
		return time.Unix(0, n)
	}
	start, stop := at(leaseFleetStart), at(leaseFleetStop)
	time.Sleep(time.Until(start))
	var requests, admitted, local, errs, last atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				d, err := lim.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
				for now := time.Now().UnixNano(); ; {
					if l := last.Load(); l >= now || last.CompareAndSwap(l, now) {
						break
					}
				}
				requests.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
				case d.Allowed:
					admitted.Add(1)
					if d.Local {
						local.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	_ = lim.Close()
	b, _ := json.Marshal(leaseReplicaResult{requests.Load(), admitted.Load(), local.Load(), errs.Load(), last.Load()})
	fmt.Println(string(b))
	return 0
}

// TestLeasesFleetBound: 4 replica processes with leases of at most 10
// share one bucket of 100 refilled at 200/s under far more demand. Their
// admissions, summed, never exceed capacity + rate × elapsed + 4 × 10
// (the unspent leased tokens: at most one lease per replica), with elapsed
// from the start until the last answer (a store charge is made before its
// answer).
func TestLeasesFleetBound(t *testing.T) {
	const replicas = 4
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			env := fleetEnv(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			start := time.Now().Add(3 * time.Second) // the processes are up by then
			stop := start.Add(2 * time.Second)
			outs := make([][]byte, replicas)
			errs := make([]error, replicas)
			var wg sync.WaitGroup
			for i := range replicas {
				wg.Go(func() {
					cmd := replicaCmd(ctx, env, "lease",
						leaseFleetStart+"="+strconv.FormatInt(start.UnixNano(), 10), leaseFleetStop+"="+strconv.FormatInt(stop.UnixNano(), 10))
					outs[i], errs[i] = cmd.Output()
				})
			}
			wg.Wait()
			var all leaseReplicaResult
			for i := range replicas {
				if errs[i] != nil {
					t.Fatalf("replica %d: %v", i, errs[i])
				}
				lines := strings.Split(strings.TrimSpace(string(outs[i])), "\n")
				var r leaseReplicaResult
				if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
					t.Fatalf("replica %d: %v in %q", i, err, outs[i])
				}
				all.Requests += r.Requests
				all.Admitted += r.Admitted
				all.Local += r.Local
				all.Errors += r.Errors
				all.Last = max(all.Last, r.Last)
			}
			if all.Last < stop.UnixNano() {
				t.Fatal("the replicas ended before the stop time")
			}
			elapsed := time.Unix(0, all.Last).Sub(start).Seconds()
			bound := float64(leaseFleetQuota.Capacity) + leaseFleetQuota.RefillPerSecond*elapsed + replicas*leaseFleetSize
			t.Logf("%d requests, %d admitted (%d from leases), %d errors in %.3fs; bound %.1f", all.Requests, all.Admitted, all.Local, all.Errors, elapsed, bound)
			if all.Errors > 0 {
				t.Fatalf("%d requests failed", all.Errors)
			}
			if a := float64(all.Admitted); a > bound || all.Admitted == 0 {
				t.Fatalf("admitted %d, want 0 < admitted <= %.1f", all.Admitted, bound)
			}
			if all.Local == 0 {
				t.Fatal("no request was admitted from a lease")
			}
		})
	}
}
