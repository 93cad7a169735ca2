package linearize_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// the bucket every history runs on: small enough that the replicas' 24
// goroutines contend for every token, with admissions and denials mixed
var testQuota = quota{capacity: 10, rate: 200}

const checkTimeout = 100 * time.Millisecond

// baseConfig is a replica's configuration before a scenario's options.
func baseConfig(t *testing.T, addrs []string, cluster bool) config {
	return config{Goroutines: goroutines, Addrs: addrs, Cluster: cluster, Prefix: redistest.Prefix(t),
		Tenants: []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, Capacity: int64(testQuota.capacity), Rate: testQuota.rate,
		Timeout: checkTimeout, Policy: core.FailOpen, Batching: true, Client: "limiter"}
}

// target is where a history runs and the faults it can inject.
type target struct {
	addrs   []string
	cluster *redistest.Cluster
	server  *redistest.Server
	proxy   *redistest.FaultProxy
	// proxies are a Cluster's, one per node; remap maps each node's
	// address to its proxy's
	proxies []*redistest.FaultProxy
	remap   map[string]string
}

// allProxies returns every fault proxy of tg.
func (tg target) allProxies() []*redistest.FaultProxy {
	if tg.proxy != nil {
		return []*redistest.FaultProxy{tg.proxy}
	}
	return tg.proxies
}

// setAll switches every proxy of tg to f.
func (tg target) setAll(f redistest.Fault) {
	for _, p := range tg.allProxies() {
		p.Set(f)
	}
}

// fault is a scenario's fault, applied while the replicas run: it returns
// the windows in which it was in force.
type fault func(t *testing.T, tg target, rs []*replica, unit time.Duration) []window

// scenario is one kind of history.
type scenario struct {
	name string
	// longOnly: run only under LINEARIZE_DURATION (make linearize), to
	// keep make test short; its fault is covered there on the other target
	longOnly bool
	cluster  bool
	// aof: on a Cluster of its own whose every node runs with appendfsync
	// always (longOnly too)
	aof     bool
	proxied bool
	options func(*config)
	fault   fault
}

// during applies on, waits d, applies off, and returns the window.
func during(t *testing.T, d time.Duration, on, off func() error) window {
	t.Helper()
	w := window{from: time.Now().UnixNano()}
	if err := on(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := off(); err != nil {
		t.Fatal(err)
	}
	w.to = time.Now().UnixNano()
	return w
}

func noFault(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit)
	return nil
}

// server returns the Redis server a fault acts on: the standalone one, or
// the master of the first tenant's slot.
func (tg target) victim(t *testing.T) *redistest.Server {
	if tg.cluster == nil {
		return tg.server
	}
	return tg.cluster.Master(t, 0)
}

func killRestart(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit / 3)
	s := tg.victim(t)
	w := during(t, unit/3, func() error { s.Kill(); return nil }, s.Restart)
	time.Sleep(unit / 2)
	return []window{w}
}

// clusterKillRestart kills a Cluster master (SIGKILL) and restarts it on
// its port and data directory; the fault lasts until the cluster says ok
// again (a restarted master refuses its slots for its first 2 s). Its
// replica is told not to take over meanwhile: a promotion without the
// writes it had not received yet is not what this history checks.
func clusterKillRestart(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit / 3)
	s := tg.victim(t)
	noFailover(t, tg.cluster, "yes")
	defer noFailover(t, tg.cluster, "no")
	w := during(t, unit/3, func() error { s.Kill(); return nil }, func() error {
		if err := s.Restart(); err != nil {
			return err
		}
		waitRoles(t, tg.cluster, 20*time.Second)
		return nil
	})
	time.Sleep(unit / 2)
	return []window{w}
}

// noFailover sets cluster-replica-no-failover on every running node.
func noFailover(t *testing.T, c *redistest.Cluster, v string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		err := cl.ConfigSet(ctx, "cluster-replica-no-failover", v).Err()
		_ = cl.Close()
		if err != nil && !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("CONFIG SET cluster-replica-no-failover %s on %s: %v", v, n.Addr(), err)
		}
	}
}

func pauseResume(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit / 3)
	s := tg.victim(t)
	// past the timeout and the probe's deadline (1 s): checks time out,
	// the probe confirms the silence, the breaker opens and the failure
	// policy (or the fallback) answers; commands wait in the server's
	// sockets and run when it resumes
	w := during(t, max(unit/2, 10*checkTimeout+300*time.Millisecond), s.Pause, s.Resume)
	time.Sleep(unit / 2)
	return []window{w}
}

// proxyFaults applies each fault in short bursts: replies dropped after
// their commands ran, connections reset.
func proxyFaults(faults ...redistest.Fault) fault {
	return func(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
		time.Sleep(unit / 3)
		var ws []window
		for _, f := range faults {
			// 25 ms bursts: a few checks of each tenant caught in each,
			// so that the search over where they ran stays small
			for range max(2, int(unit/(250*time.Millisecond))) {
				ws = append(ws, during(t, 25*time.Millisecond, func() error { tg.setAll(f); return nil },
					func() error { tg.setAll(redistest.Pass); return nil }))
				time.Sleep(unit / 8)
			}
		}
		time.Sleep(unit / 3)
		return ws
	}
}

// failover hands every master's slots to its replica (CLUSTER FAILOVER on
// the replica: coordinated, no acknowledged write lost) under load.
func failover(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit / 3)
	w := window{from: time.Now().UnixNano()}
	ctx := context.Background()
	for _, n := range tg.cluster.Nodes[tg.cluster.Masters:] {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			err = c.Do(ctx, "CLUSTER", "FAILOVER").Err()
		}
		_ = c.Close()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", n.Addr(), err)
		}
	}
	waitRoles(t, tg.cluster, 20*time.Second)
	w.to = time.Now().UnixNano()
	time.Sleep(unit / 2)
	return []window{w}
}

// waitRoles waits until the cluster has its number of masters again and
// says ok.
func waitRoles(t *testing.T, c *redistest.Cluster, within time.Duration) {
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		masters, ok := 0, true
		for _, n := range c.Nodes {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
			role, err := cl.Do(ctx, "ROLE").Slice()
			info, err2 := cl.ClusterInfo(ctx).Result()
			_ = cl.Close()
			if err != nil || err2 != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				continue
			}
			if role[0] == "master" {
				masters++
			}
		}
		if ok && masters == c.Masters {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not settled after %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clockStep steps the second replica's clock back 2 s, then forward again.
func clockStep(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	time.Sleep(unit / 3)
	rs[1].send(t, "step -2s")
	time.Sleep(unit / 3)
	rs[1].send(t, "step 2s")
	time.Sleep(unit / 3)
	return nil
}

var scenarios = []scenario{
	{name: "standalone/healthy", fault: noFault},
	{name: "standalone/killed-restarted", fault: killRestart,
		options: func(c *config) { c.Policy, c.DenyCache, c.Batching = core.FailClosed, true, false }},
	{name: "standalone/sigstop", fault: pauseResume, options: func(c *config) { c.Fallback = 1.0 / 3 }},
	{name: "standalone/leases-killed-restarted", fault: killRestart, options: func(c *config) { c.Lease = 4 }},
	{name: "standalone/lost-replies-resets", proxied: true, fault: proxyFaults(redistest.DropReply, redistest.Reset)},
	// the seeded replaying client's fault, for the real limiter
	{name: "standalone/reply-flicker", proxied: true, longOnly: true, fault: flicker},
	{name: "standalone/client-clock-step", fault: clockStep, options: func(c *config) { c.ClientClock, c.DenyCache = true, true }},
	{name: "cluster/sigstop", cluster: true, fault: pauseResume, options: func(c *config) { c.Fallback, c.DenyCache = 1.0/3, true }},
	{name: "cluster/failover", cluster: true, fault: failover, options: func(c *config) { c.Lease = 3 }},
	{name: "cluster/killed-restarted", cluster: true, aof: true, longOnly: true, fault: clusterKillRestart,
		options: func(c *config) {
			// a slow refill: the 2.5 s outage refills half the bucket, so a
			// restart that lost the buckets admits what the model has not
			c.Policy, c.DenyCache, c.Capacity, c.Rate = core.FailClosed, true, 100, 20
		}},
	// every connection through a fault proxy per node (the client's dialer
	// maps each node's address to its proxy's)
	{name: "cluster/lost-replies-resets", cluster: true, proxied: true, fault: proxyFaults(redistest.DropReply, redistest.Reset)},
	{name: "cluster/client-clock-step", cluster: true, longOnly: true, fault: clockStep, options: func(c *config) { c.ClientClock = true }},
}

// The mixes beyond single-bucket checks (config.Mix), each a scenario's
// options.
func multiMix(c *config)   { c.Mix, c.AlsoCapacity, c.AlsoRate = "multi", 6, 100 }
func slotsMix(c *config)   { c.Mix, c.Concurrency = "slots", 2 }
func settleMix(c *config)  { c.Mix = "settle" }
func reserveMix(c *config) { c.Mix = "reserve" }

func allMix(c *config) { multiMix(c); slotsMix(c); c.Mix = "all" }

// mixes are the mixes every scenario also runs with under
// LINEARIZE_DURATION; make test runs the three at once under lost replies
// and resets (the fault that leaves the most checks, settles and releases
// ambiguous), standalone and on the Cluster, and settles (refunds among
// them) with the deny cache under a clock step.
var mixes = []struct {
	name    string
	options func(*config)
	short   []string // the scenarios it runs in under make test
}{
	{"multi", multiMix, nil},
	{"slots", slotsMix, nil},
	{"settle", settleMix, []string{"standalone/client-clock-step"}},
	{"all", allMix, []string{"standalone/lost-replies-resets", "cluster/lost-replies-resets"}},
	{"reserve", reserveMix, []string{"standalone/lost-replies-resets"}},
}

// withMixes is scenarios and, for each mix, every scenario with it.
func withMixes(scs []scenario) []scenario {
	all := append([]scenario(nil), scs...)
	for _, m := range mixes {
		for _, sc := range scs {
			mixed := sc
			mixed.name = m.name + "/" + sc.name
			mixed.longOnly = !slices.Contains(m.short, sc.name)
			own, mix := sc.options, m.options
			mixed.options = func(c *config) {
				if own != nil {
					own(c)
				}
				mix(c)
			}
			all = append(all, mixed)
		}
	}
	return all
}

// aof: every acknowledged write is on disk before the reply, so a killed
// and restarted server keeps every charge it acknowledged
var aof = []string{"--appendonly", "yes", "--appendfsync", "always"}

// history runs one scenario's history and returns it with its fault windows.
func history(t *testing.T, sc scenario, tg target, unit time.Duration, tweak func(int, *config)) (config, []op, []window) {
	cfg := baseConfig(t, tg.addrs, sc.cluster)
	cfg.Remap = tg.remap
	if sc.options != nil {
		sc.options(&cfg)
	}
	rs := startReplicas(t, cfg, tweak)
	faults := sc.fault(t, tg, rs, unit)
	return cfg, stopReplicas(t, rs, cfg.Timeout), faults
}

// check checks one history and fails t unless it is linearizable and the
// degraded answers keep their bounds.
func check(t *testing.T, name string, cfg config, ops []op, faults []window) tally {
	t.Helper()
	start := time.Now()
	res, info := linearizable(cfg.quotas(), ops, faults, 60*time.Second, true)
	c := count(ops)
	report(t, name, c, time.Since(start))
	if res != porcupine.Ok {
		t.Fatalf("%s: history of %d operations is %s; %s", name, len(ops), res, info)
	}
	for _, b := range degradedBounds(cfg, ops) {
		t.Error(b)
	}
	if c.admitted == 0 {
		t.Fatalf("%s: a history without an admission by the store checks nothing: %s", name, c)
	}
	// a mix's history must hold the operations it is there to check
	all := cfg.Mix == "all"
	switch {
	case (all || cfg.Mix == "multi") && c.multi == 0,
		(all || cfg.Mix == "slots") && (c.slotDenied == 0 || c.released == 0),
		(all || cfg.Mix == "settle") && c.settled == 0,
		cfg.Mix == "reserve" && (c.reserved == 0 || c.reserveDenied == 0):
		t.Fatalf("%s: a history of mix %s without its operations checks nothing new: %s", name, cfg.Mix, c)
	}
	return c
}

func newStandalone(t *testing.T) target {
	s := redistest.NewServer(t, aof...)
	return target{addrs: []string{s.Addr()}, server: s}
}

// TestLinearizable: the limiter's decisions from 3 replica processes of 8
// goroutines each are linearizable under every fault, standalone and on
// a Cluster; with LINEARIZE_DURATION, histories repeat until it has
// passed.
func TestLinearizable(t *testing.T) {
	long := durationFromEnv(t)
	unit := 500 * time.Millisecond
	if long > 0 {
		unit = time.Second
	}
	// one Cluster for the Cluster histories: 3 masters with a replica each
	cl := redistest.NewCluster(t, 3, 1)
	// and one whose nodes persist every write, for a restart: its history
	// runs under LINEARIZE_DURATION only
	var aofCluster *redistest.Cluster
	if long > 0 {
		aofCluster = redistest.NewCluster(t, 3, 1, aof...)
	}
	deadline := time.Now().Add(long)
	var total tally
	histories := 0
	defer func() { t.Logf("%d histories; in all %s", histories, total) }()
	for round := 0; round == 0 || time.Now().Before(deadline); round++ {
		for _, sc := range withMixes(scenarios) {
			if sc.longOnly && long == 0 {
				continue
			}
			t.Run(sc.name, func(t *testing.T) {
				var tg target
				switch {
				case sc.cluster && sc.aof:
					tg = target{addrs: aofCluster.Addrs(), cluster: aofCluster}
				case sc.cluster:
					tg = target{addrs: cl.Addrs(), cluster: cl}
				default:
					tg = newStandalone(t)
				}
				switch {
				case sc.proxied && sc.cluster:
					tg.remap = map[string]string{}
					for _, n := range cl.Nodes {
						p := redistest.NewFaultProxy(t, n.Addr())
						tg.proxies = append(tg.proxies, p)
						tg.remap[n.Addr()] = p.Addr()
					}
				case sc.proxied:
					tg.proxy = redistest.NewFaultProxy(t, tg.server.Addr())
					tg.addrs = []string{tg.proxy.Addr()}
				}
				cfg, ops, faults := history(t, sc, tg, unit, nil)
				c := check(t, sc.name, cfg, ops, faults)
				if sc.proxied && c.ambiguous+c.notSent == 0 {
					t.Fatalf("%s: no check degraded: the proxies' faults never reached the client (%s)", sc.name, c)
				}
				total.add(c)
				histories++
			})
		}
	}
}
