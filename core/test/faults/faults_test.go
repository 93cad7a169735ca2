package faults_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// latencyBound is the worst a check may take while Redis misbehaves: the
// limiter's 100 ms timeout, then the probe that confirms the store's
// silence (1 s at the most), plus scheduling slack on a shared 2-core
// machine.
const latencyBound = 1500 * time.Millisecond

var policies = []core.FailurePolicy{core.FailOpen, core.FailClosed}

func policyAnswer(p core.FailurePolicy) string {
	if p == core.FailClosed {
		return "503 (failed_closed)"
	}
	return "200 (failed_open)"
}

// wantDegraded fails t unless every decision in m was answered by the
// policy p and the slowest check took at most latencyBound.
func wantDegraded(t *testing.T, m map[core.Reason]int, worst time.Duration, p core.FailurePolicy, while string) {
	t.Helper()
	if err := degradedOnly(m, p); err != nil {
		t.Fatal(err)
	}
	if worst > latencyBound {
		t.Fatalf("worst check took %v %s", worst, while)
	}
}

// waitDecided waits until lim's checks are decided by Redis again.
func waitDecided(t *testing.T, lim *core.Limiter, what string) {
	t.Helper()
	waitFor(t, 5*time.Second, what, func() bool {
		d, err := lim.Allow(context.Background(), quota.Tenant{ID: "probe"}, "default", 1)
		return err == nil && d.Reason == core.ReasonOK
	})
}

func TestNotRunningAtStart(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			srv := redistest.NewServer(t)
			srv.Stop()
			lim := newLimiter(t, srv.Client(t), p) // the service starts while Redis is down
			ld := startLoad(lim, 4, 10)
			defer ld.finish()
			time.Sleep(400 * time.Millisecond)
			m, worst := ld.snapshot()
			wantDegraded(t, m, worst, p, "while Redis was down")
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			waitDecided(t, lim, "decisions from Redis")
			record(row{"Redis not running at start", p, policyAnswer(p) + " until Redis answers; then enforced, no restart of the service", worst})
		})
	}
}

func TestKilledUnderLoadAndRestarted(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			srv := redistest.NewServer(t)
			lim := newLimiter(t, srv.Client(t), p)
			ld := startLoad(lim, 8, 20)
			defer ld.finish()
			time.Sleep(300 * time.Millisecond)
			srv.Kill()
			time.Sleep(50 * time.Millisecond)
			ld.resetTally()
			time.Sleep(500 * time.Millisecond)
			m, worst := ld.snapshot()
			wantDegraded(t, m, worst, p, "while Redis was dead")
			if err := srv.Restart(); err != nil { // data and script cache lost
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "recovery after restart", func() bool {
				m, _ := ld.snapshot()
				return m[core.ReasonOK] > 0
			})
			ld.resetTally()
			start := time.Now()
			time.Sleep(time.Second)
			elapsed := time.Since(start)
			m, _ = ld.snapshot()
			if m[core.ReasonOK] == 0 || m[core.ReasonOverLimit] == 0 {
				t.Fatalf("after restart the limiter should admit and deny again: %v", m)
			}
			checkAccounting(t, ld, elapsed+100*time.Millisecond)
			record(row{"Redis killed under load, restarted", p, policyAnswer(p) + " while down; scripts reloaded (NOSCRIPT) and buckets enforced after restart", worst})
		})
	}
}

func TestScriptFlushUnderLoad(t *testing.T) {
	for _, batching := range []bool{false, true} {
		name := "plain"
		if batching {
			name = "batched"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.NewServer(t)
			c := srv.Client(t)
			lim := newLimiter(t, c, core.FailClosed, core.WithBatching(batching))
			ld := startLoad(lim, 8, 20)
			start := time.Now()
			for range 10 {
				time.Sleep(100 * time.Millisecond)
				if err := c.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ld.finish()
			elapsed := time.Since(start)
			m, worst := ld.snapshot()
			if m[core.ReasonFailedClosed] != 0 || m[core.ReasonOK] == 0 {
				t.Fatalf("SCRIPT FLUSH must be invisible: %v", m)
			}
			checkAccounting(t, ld, elapsed)
			record(row{"SCRIPT FLUSH under load (" + name + ")", core.FailClosed, "no failed decision: NOSCRIPT reloads and resends only unexecuted calls", worst})
		})
	}
}

func TestHungThenResumed(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			srv := redistest.NewServer(t)
			// a client that does not honour context deadlines: the limiter's
			// own timeout must still hold
			c := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = 2 * time.Second })
			lim := newLimiter(t, c, p)
			ld := startLoad(lim, 8, 20)
			defer ld.finish()
			time.Sleep(200 * time.Millisecond)
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			ld.resetTally()
			time.Sleep(1500 * time.Millisecond) // the first checks wait for the probe (1 s)
			m, worst := ld.snapshot()
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			wantDegraded(t, m, worst, p, "while Redis was hung")
			waitDecided(t, lim, "recovery after resume")
			record(row{"Redis hung (SIGSTOP), then resumed", p, policyAnswer(p) + " once a probe confirms the silence (the timeout, then at most 1 s), circuit opens; recovers on resume", worst})
		})
	}
}

func TestOutOfMemory(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			srv := redistest.NewServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
			c := srv.Client(t)
			ctx := context.Background()
			lim := newLimiter(t, c, p)
			// warm up: the script is cached before memory runs out
			if d, err := lim.Allow(ctx, quota.Tenant{ID: "warm"}, "default", 1); err != nil || !d.Allowed {
				t.Fatalf("warm-up: %+v, %v", d, err)
			}
			// fill memory with ever smaller values until even a small write
			// is refused
			var keys []string
			for _, size := range []int{64 << 10, 1 << 10, 16} {
				junk := strings.Repeat("x", size)
				for range 100000 {
					k := "junk:" + redistest.Prefix(t)
					err := c.Set(ctx, k, junk, 0).Err()
					if err != nil {
						if !strings.HasPrefix(err.Error(), "OOM") {
							t.Fatalf("filling memory: %v", err)
						}
						break
					}
					keys = append(keys, k)
				}
			}
			start := time.Now()
			d, err := lim.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 1)
			worst := time.Since(start)
			if !errors.Is(err, core.ErrStore) || !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("OOM inside the script must be a store failure: %+v, %v", d, err)
			}
			if d.Denied() || (p == core.FailClosed) != (d.Reason == core.ReasonFailedClosed) {
				t.Fatalf("OOM answered %v, want the failure policy's answer, never a denial", d.Reason)
			}
			// free memory: nothing was charged while the write failed
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			d, err = lim.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 1)
			if err != nil || d.Remaining != slowQuota.Capacity-1 {
				t.Fatalf("after OOM: %+v, %v; want a full bucket charged once", d, err)
			}
			record(row{"maxmemory reached (OOM inside the script)", p, policyAnswer(p) + "; store error kind oom; nothing charged", worst})
		})
	}
}

func TestClusterFailover(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 1)
	for _, p := range []core.FailurePolicy{core.FailOpen} {
		t.Run(p.String(), func(t *testing.T) {
			cc := cl.Client(t)
			lim := newLimiter(t, cc, p, core.WithBatching(true))
			ld := startLoad(lim, 8, 60)
			defer ld.finish()
			time.Sleep(400 * time.Millisecond)
			master := cl.Master(t, 0)
			master.Kill()
			ld.resetTally()
			// failover: cluster-node-timeout 2 s, then a replica is promoted
			time.Sleep(time.Second)
			var lastErr error
			defer func() {
				if t.Failed() {
					t.Logf("last error while waiting: %v", lastErr)
				}
			}()
			waitFor(t, 20*time.Second, "every tenant served by Redis again", func() bool {
				ctx := context.Background()
				for i := range 60 {
					d, err := lim.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 0)
					if err != nil || d.Reason != core.ReasonOK {
						lastErr = err
						return false
					}
				}
				return true
			})
			m, worst := ld.snapshot()
			ld.mu.Lock()
			for _, err := range ld.badErrs {
				t.Errorf("unexpected error: %v", err)
			}
			ld.mu.Unlock()
			for r := range m {
				if r == core.ReasonFailedClosed || r == core.ReasonInvalid {
					t.Fatalf("unexpected decisions during failover: %v", m)
				}
			}
			if worst > latencyBound {
				t.Fatalf("worst check took %v during failover", worst)
			}
			ld.resetTally()
			start := time.Now()
			time.Sleep(time.Second)
			checkAccounting(t, ld, time.Since(start)+100*time.Millisecond)
			record(row{"Cluster master killed under load (failover, MOVED)", p, "tenants on the dead master answered by policy until a replica is promoted; others unaffected; no CROSSSLOT", worst})
		})
	}
}

func TestClientClockJump(t *testing.T) {
	srv := redistest.NewServer(t)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	lim := newLimiter(t, srv.Client(t), core.FailClosed, core.WithClock(clock))
	ctx := context.Background()
	admit := func() int {
		n := 0
		for range 50 {
			if d, _ := lim.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 1); d.Allowed {
				n++
			}
		}
		return n
	}
	if n := admit(); n != int(slowQuota.Capacity) {
		t.Fatalf("burst admitted %d", n)
	}
	now = now.Add(-time.Hour) // the clock steps back
	if n := admit(); n != 0 {
		t.Fatalf("a clock step back minted %d tokens", n)
	}
	now = now.Add(time.Hour) // and recovers: the step is not counted twice
	if n := admit(); n != 0 {
		t.Fatalf("a recovered clock minted %d tokens", n)
	}
	now = now.Add(24 * time.Hour) // a jump forward refills, never past capacity
	if n := admit(); n != int(slowQuota.Capacity) {
		t.Fatalf("after a forward jump admitted %d, want exactly capacity", n)
	}
	record(row{"client-clock mode, clock jumps back then forward", core.FailClosed, "a step back mints and burns nothing; a jump forward refills at most to capacity", 0})
}

// TestGarbageState: one tenant's stored bucket is overwritten with values the
// script never writes (NaN, infinities, negative or above-capacity balances,
// unparsable text) while other tenants are under load. Each time the garbage
// bucket starts full and is rewritten; the other tenants see only ordinary
// decisions, within the token-bucket bound.
func TestGarbageState(t *testing.T) {
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	lim := newLimiter(t, c, core.FailClosed, core.WithTimeout(time.Second))
	ld := startLoad(lim, 4, 10)
	defer ld.finish()
	key, err := lim.Keys().Bucket("garbage", "default")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	for round := range 5 {
		for _, g := range []string{"nan " + now, "-nan " + now, "inf " + now, "-inf " + now, "0 nan", "0 inf", "0 -inf",
			"-2e15 " + now, "1e9 " + now, "0 1e300", "abc", "", "5 x", "0x1F " + now} {
			if err := c.Set(ctx, key, g, 0).Err(); err != nil {
				t.Fatal(err)
			}
			d, err := lim.Allow(ctx, quota.Tenant{ID: "garbage"}, "default", 1)
			if err != nil || !d.Allowed || d.Remaining != slowQuota.Capacity-1 {
				t.Fatalf("round %d, stored %q: %+v, %v; want a full bucket charged once", round, g, d, err)
			}
			v, err := c.Get(ctx, key).Result()
			if err != nil || !strings.HasPrefix(v, "19 ") {
				t.Fatalf("round %d, stored %q: rewritten as %q, %v", round, g, v, err)
			}
		}
	}
	m, _ := ld.snapshot()
	for r, n := range m {
		if r != core.ReasonOK && r != core.ReasonOverLimit && n > 0 {
			t.Fatalf("other tenants got %d decisions %v: %v", n, r, m)
		}
	}
	checkAccounting(t, ld, time.Since(start)+100*time.Millisecond)
	record(row{"garbage stored values for one tenant", core.FailClosed, "other tenants unaffected, the garbage bucket starts full", 0})
}
