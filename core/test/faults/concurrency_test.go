package faults_test

import (
	"cmp"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestConcurrencyStoreDown: a slot is held when Redis hangs (SIGSTOP) or
// dies. Checks of the class answer by the failure policy and take no
// slot; the holder's release returns within the check timeout; once Redis
// is back, the slot is free again within the lease (released, reclaimed at
// its deadline, or gone with the killed server) and the limit holds.
func TestConcurrencyStoreDown(t *testing.T) {
	for _, fault := range []string{"hung (SIGSTOP), then resumed", "killed, restarted"} {
		for _, p := range policies {
			t.Run(fault+"/"+p.String(), func(t *testing.T) {
				srv := redistest.NewServer(t)
				c := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
				worst := concurrencyStoreDown(t, c, srv, fault, p, "t1", "", 0)
				record(row{"concurrency slot held, Redis " + fault, p, policyAnswer(p) + " without a slot while down; the holder's release returns within the timeout; the slot free again within the lease once Redis is back, and the limit enforced", worst})
			})
		}
	}
}

// TestConcurrencyClusterMasterDown: the same on a 3-master Cluster (no
// replicas, so no failover): the master holding a tenant's slots hangs or
// dies while the tenant holds one. That tenant is answered by the policy
// and its slot is free again within the lease once the master is back; a
// tenant whose slots another master holds still takes and is refused
// slots by Redis during the outage.
func TestConcurrencyClusterMasterDown(t *testing.T) {
	for _, fault := range []string{"hung (SIGSTOP), then resumed", "killed, restarted"} {
		for _, p := range policies {
			t.Run(fault+"/"+p.String(), func(t *testing.T) {
				cl := redistest.NewCluster(t, 3, 0)
				cc := cl.Client(t)
				victim := cl.Master(t, 0)
				ks, err := keys.New(redistest.Prefix(t))
				if err != nil {
					t.Fatal(err)
				}
				var onDead, onLive string
				for i := 0; onDead == "" || onLive == ""; i++ {
					tenant := "t" + strconv.Itoa(i)
					key, err := ks.Slots(tenant, "default")
					if err != nil {
						t.Fatal(err)
					}
					m, err := cc.MasterForKey(context.Background(), key)
					if err != nil {
						t.Fatal(err)
					}
					if m.Options().Addr == victim.Addr() {
						onDead = cmp.Or(onDead, tenant)
					} else {
						onLive = cmp.Or(onLive, tenant)
					}
				}
				// the cluster marks a node failed after its node timeout
				// (2 s in redistest), and then refuses every key until it
				// is back: allow for it after the master returns
				worst := concurrencyStoreDown(t, cc, victim, fault, p, onDead, onLive, 2*2*time.Second)
				record(row{"concurrency slot held, Cluster master of three " + fault, p, policyAnswer(p) + " without a slot for tenants on that master while down; tenants on the other masters take and are refused slots by Redis; the slot free again within the lease once the master is back, and the limit enforced", worst})
			})
		}
	}
}

// concurrencyStoreDown holds a slot of tenant, breaks srv (the server
// holding it) by fault, and checks the answers while it is down and after
// it is back. other, when not empty, is a tenant whose slots another server
// holds: it must be decided by Redis during the outage. recovery is extra
// time the store may take to serve again after srv is back.
func concurrencyStoreDown(t *testing.T, c redis.UniversalClient, srv *redistest.Server, fault string, p core.FailurePolicy, tenant, other string, recovery time.Duration) (worst time.Duration) {
	t.Helper()
	const timeout, lease = 200 * time.Millisecond, 1500 * time.Millisecond
	q := quota.Quota{Capacity: 1000, RefillPerSecond: 100, Concurrency: 1}
	lim, err := core.New(c, resolver(q), core.WithPrefix(redistest.Prefix(t)), core.WithFailurePolicy(p),
		core.WithTimeout(timeout), core.WithCircuitBreaker(0, 0), core.WithConcurrencySlots(lease, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ctx := context.Background()
	req := core.Request{Tenant: quota.Tenant{ID: tenant}, Class: "default", Cost: 1}
	held, err := lim.Check(ctx, req)
	if err != nil || held.Slot == nil {
		t.Fatalf("before the fault: %v, %v", held.Reason, err)
	}
	var otherHeld core.Decision
	otherReq := core.Request{Tenant: quota.Tenant{ID: other}, Class: "default", Cost: 1}
	if other != "" {
		if otherHeld, err = lim.Check(ctx, otherReq); err != nil || otherHeld.Slot == nil {
			t.Fatalf("before the fault, tenant %s: %v, %v", other, otherHeld.Reason, err)
		}
	}
	if fault[0] == 'h' {
		err = srv.Pause()
	} else {
		srv.Kill()
	}
	if err != nil {
		t.Fatal(err)
	}
	if other != "" {
		// at once, well within the node timeout
		if d, err := lim.Check(ctx, otherReq); err != nil || d.Reason != core.ReasonConcurrencyLimit {
			t.Fatalf("tenant %s on a live master, slot held: %v, %v; want a concurrency denial from Redis", other, d.Reason, err)
		}
		otherHeld.Slot.Release()
		d, err := lim.Check(ctx, otherReq)
		if err != nil || d.Slot == nil {
			t.Fatalf("tenant %s on a live master after its release: %v, %v; want a slot", other, d.Reason, err)
		}
		d.Slot.Release()
	}
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
	budget := 2*lease + 10*timeout + recovery
	deadline := time.Now().Add(budget)
	for {
		if again, _ = lim.Check(ctx, req); again.Slot != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot not free %v after Redis came back: %v", budget, again.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := lim.Check(ctx, req); err != nil || d.Reason != core.ReasonConcurrencyLimit {
		t.Fatalf("a second request beside the one holding the slot: %v, %v; want a concurrency denial", d.Reason, err)
	}
	again.Slot.Release()
	t.Logf("worst check latency while down: %v", worst.Round(time.Millisecond))
	return worst
}
