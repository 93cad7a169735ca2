package faults_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestClusterMasterDown: one master of a 3-master Cluster (no replicas, so
// no failover) is killed while every tenant checks. Tenants whose slots
// the other masters hold are decided by Redis as before: never degraded,
// never shed (the breaker is kept per master). Tenants on the dead master
// get the failure policy; with the local fallback, each is admitted at
// most its local bound over the outage (share × capacity + share × rate ×
// elapsed), whatever the other tenants' successes (the fallback resets a
// tenant's local bucket only on its own successful store call).
func TestClusterMasterDown(t *testing.T) {
	const share = 0.5
	for _, fallback := range []bool{false, true} {
		name := map[bool]string{false: "policy", true: "fallback"}[fallback]
		t.Run(name, func(t *testing.T) {
			cl := redistest.NewCluster(t, 3, 0)
			cc := cl.Client(t)
			opts := []core.Option{core.WithBatching(true)}
			if fallback {
				opts = append(opts, core.WithLocalFallback(share))
			}
			lim := newLimiter(t, cc, core.FailClosed, opts...)
			ctx := context.Background()
			dead := cl.Master(t, 0).Addr()
			// the tenants on the master about to die, and the others
			var onDead, onLive []string
			for i := 0; len(onDead) < 8 || len(onLive) < 16; i++ {
				tenant := "t" + strconv.Itoa(i)
				key, err := lim.Keys().Bucket(tenant, "default")
				if err != nil {
					t.Fatal(err)
				}
				m, err := cc.MasterForKey(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if m.Options().Addr == dead {
					if len(onDead) < 8 {
						onDead = append(onDead, tenant)
					}
				} else if len(onLive) < 16 {
					onLive = append(onLive, tenant)
				}
			}
			for _, tn := range append(append([]string(nil), onDead...), onLive...) {
				if d, err := lim.Allow(ctx, quota.Tenant{ID: tn}, "default", 0); err != nil || d.Reason != core.ReasonOK {
					t.Fatalf("before the kill, %s: %v %v", tn, d.Reason, err)
				}
			}
			cl.Master(t, 0).Kill()

			admitted := map[string]int{}
			live := map[core.Reason]int{}
			deadAnswers := map[core.Reason]int{}
			start := time.Now()
			for time.Since(start) < 1500*time.Millisecond {
				for _, tn := range onLive {
					d, err := lim.Allow(ctx, quota.Tenant{ID: tn}, "default", 1)
					live[d.Reason]++
					if d.Degraded() || d.Reason == core.ReasonOverloaded || err != nil {
						t.Fatalf("tenant %s on a live master: %v %v (fallback %v)", tn, d.Reason, err, d.Fallback)
					}
				}
				for _, tn := range onDead {
					d, _ := lim.Allow(ctx, quota.Tenant{ID: tn}, "default", 1)
					deadAnswers[d.Reason]++
					if d.Allowed {
						admitted[tn]++
					}
					if !fallback && d.Reason != core.ReasonFailedClosed && d.Reason != core.ReasonOverloaded {
						t.Fatalf("tenant %s on the dead master: %v, want the policy's answer", tn, d.Reason)
					}
					if fallback && !d.Fallback && d.Reason != core.ReasonOverloaded && d.Reason != core.ReasonFailedClosed {
						t.Fatalf("tenant %s on the dead master: %v, not from the fallback", tn, d.Reason)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			elapsed := time.Since(start)
			t.Logf("live masters: %v; dead master: %v; admitted on the dead master: %v", live, deadAnswers, admitted)
			if live[core.ReasonOK] == 0 || live[core.ReasonOverLimit] == 0 {
				t.Fatalf("tenants on live masters were not both admitted and denied by Redis: %v", live)
			}
			if fallback {
				bound := share*float64(slowQuota.Capacity) + share*slowQuota.RefillPerSecond*elapsed.Seconds()
				for _, tn := range onDead {
					if float64(admitted[tn]) > bound+1 {
						t.Errorf("tenant %s on the dead master admitted %d by the fallback in %v, local bound %.1f", tn, admitted[tn], elapsed, bound)
					}
				}
				if deadAnswers[core.ReasonOK] == 0 {
					t.Errorf("the fallback admitted nothing on the dead master: %v", deadAnswers)
				}
			}
			record(row{"one master of three killed, no replica (" + name + ")", core.FailClosed,
				map[bool]string{false: "tenants on the dead master 503 (failed_closed); tenants on the others decided by Redis, never degraded",
					true: "tenants on the dead master answered by their own local buckets, each within share × its bound; the others decided by Redis, never degraded"}[fallback], 0})
		})
	}
}
