package core_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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

// TestBatchingSlowMasterHoldsOnlyItsTenants: on a 3-master Cluster, one
// master's replies are held (a fault proxy in front of it stalls them:
// the master runs every command, its answers come late) while its
// tenants' checks are on the wire. Checks of tenants on the other masters
// meanwhile are each answered by Redis (admitted, never shed, never
// degraded) within one store timeout of their start: no batch holding one
// waits on the slow master. The slow master's pipelines end no earlier
// than one store timeout after their write (or when it answers), so a
// healthy check that waited for one took at least that long. The timeout
// is long (10 s) so that the bound says "did not wait", not "was fast";
// the stall is lifted as soon as the healthy checks are done, and the
// slow master's tenants are then answered by Redis too.
//
// With batching off the same holds of connections: each master's pool is
// its own (go-redis's, PoolSize per node), and so is the wait for one. The
// pools are one connection each here, so that the slow master's calls
// hold every connection they may.
func TestBatchingSlowMasterHoldsOnlyItsTenants(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "direct"}[batching], func(t *testing.T) {
			slowMasterHoldsOnlyItsTenants(t, batching)
		})
	}
}

func slowMasterHoldsOnlyItsTenants(t *testing.T, batching bool) {
	const timeout = 10 * time.Second
	cl := redistest.NewCluster(t, 3, 0)
	slow := cl.Master(t, 0).Addr()
	proxy := redistest.NewFaultProxy(t, slow)
	// without batching, one connection per master, opened by the warm-up
	// below: a connection opened while the master's replies are held could
	// not finish its handshake
	pool := map[bool]int{true: 4, false: 1}[batching]
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: pool,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == slow {
				addr = proxy.Addr() // every connection to the slow master goes through the proxy
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = cc.Close() })
	direct := cl.Master(t, 0).Client(t) // not through the proxy
	reader := sdkmetric.NewManualReader()
	l := newLimiter(t, cc, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(100000)}),
		core.WithBatching(batching), core.WithTimeout(timeout), core.WithFailurePolicy(core.FailClosed),
		core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	ctx := context.Background()
	var onSlow, onHealthy []string
	for i := 0; len(onSlow) < 8 || len(onHealthy) < 32; i++ {
		tenant := "t" + strconv.Itoa(i)
		key, err := l.Keys().Bucket(tenant, "default")
		if err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == slow {
			if len(onSlow) < 8 {
				onSlow = append(onSlow, tenant)
			}
		} else if len(onHealthy) < 32 {
			onHealthy = append(onHealthy, tenant)
		}
	}
	for _, tn := range append(slices.Clone(onSlow), onHealthy...) {
		check(t, l, tn, 0) // every master's connections and script cache warm
	}

	ran := evalshaCalls(t, direct)
	proxy.Set(redistest.Stall)
	t.Cleanup(func() { proxy.Set(redistest.Pass) })
	before := roundTrips(t, reader)
	var slowWG sync.WaitGroup
	slowAnswers := make([]core.Reason, len(onSlow))
	slowErrs := make([]error, len(onSlow))
	for i, tn := range onSlow {
		slowWG.Go(func() {
			d, err := l.Allow(ctx, quota.Tenant{ID: tn}, "default", 1)
			slowAnswers[i], slowErrs[i] = d.Reason, err
		})
	}
	if batching {
		// the slow master's checks are on the wire (two pipelines in
		// flight), the rest of them queued
		waitUntil(t, "the slow master's checks on the wire", func() bool { return roundTrips(t, reader) >= before+2 })
	} else {
		// the one connection to the slow master carries a check (the
		// master ran it: only its reply is held), the rest wait for it
		waitUntil(t, "the slow master's connection busy", func() bool { return evalshaCalls(t, direct) >= ran+1 })
	}

	const perTenant = 5
	type answer struct {
		tenant string
		reason core.Reason
		err    error
		took   time.Duration
	}
	answers := make(chan answer, len(onHealthy)*perTenant)
	var healthyWG sync.WaitGroup
	for _, tn := range onHealthy {
		healthyWG.Go(func() {
			for range perTenant {
				start := time.Now()
				d, err := l.Allow(ctx, quota.Tenant{ID: tn}, "default", 1)
				answers <- answer{tn, d.Reason, err, time.Since(start)}
			}
		})
	}
	healthyDone := make(chan struct{})
	go func() { healthyWG.Wait(); close(healthyDone) }()
	select {
	case <-healthyDone:
	case <-time.After(3 * timeout): // past the slow master's pipelines' timeout: an old batcher's healthy checks then go out
		t.Fatalf("the healthy masters' checks not answered within %v: %d of %d", 3*timeout, len(answers), cap(answers))
	}
	proxy.Set(redistest.Pass)
	close(answers)
	var worst time.Duration
	late, n := 0, 0
	for a := range answers {
		n++
		if a.err != nil || a.reason != core.ReasonOK {
			t.Errorf("tenant %s on a healthy master: %v, %v; want admitted by Redis", a.tenant, a.reason, a.err)
		}
		if a.took >= timeout {
			late++
		}
		worst = max(worst, a.took)
	}
	if late > 0 {
		t.Errorf("%d of %d checks on healthy masters took a store timeout (%v) or more (the longest %v): they waited for the slow master's pipeline", late, n, timeout, worst)
	}
	slowWG.Wait()
	for i, tn := range onSlow {
		if slowErrs[i] != nil || slowAnswers[i] != core.ReasonOK {
			t.Errorf("tenant %s on the slow master, once it answers: %v, %v; want admitted by Redis", tn, slowAnswers[i], slowErrs[i])
		}
	}
	t.Logf("%d checks on healthy masters while the slow master held its replies: the longest took %v", n, worst)
}

// evalshaCalls is how many EVALSHA calls c's server has run (INFO
// commandstats).
func evalshaCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			return n
		}
	}
	return 0
}
