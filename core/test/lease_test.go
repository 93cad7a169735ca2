package core_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// scriptCalls is the number of script calls (EVALSHA and EVAL) the server
// has run since its stats were reset: the store calls a limiter made.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		x, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += x
	}
	return n
}

// TestLeasesBound: several replicas (separate clients) with leases share one
// bucket under concurrent load; their admissions never exceed capacity +
// rate × elapsed + replicas × lease size, on a standalone server and a
// Cluster, with and without batching.
//
// A lease runs from when the check that took it was sent, so one whose
// reply takes longer than its TTL arrives spent: on a machine loaded by
// other test packages a round trip passed 200 ms, every lease was dead on
// arrival, and none admitted anything ("admitted 16 (0 from leases)").
// The TTL is the check timeout here, longer than the run: the bound does
// not depend on it, and expiry is TestLeaseArithmetic's.
func TestLeasesBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		const capacity, rate, size, instances, workers = 20, 10.0, 5, 4, 40
		r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: capacity, RefillPerSecond: rate}})
		prefix := redistest.Prefix(t)
		lims := make([]*core.Limiter, instances)
		for i := range lims {
			l, err := core.New(b.client(t), r, append(v.options(),
				core.WithPrefix(prefix), core.WithTimeout(5*time.Second), core.WithLeases("default", size, 5*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			lims[i] = l
		}
		var admitted, local atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		stop := start.Add(1500 * time.Millisecond)
		for w := range workers {
			wg.Go(func() {
				for time.Now().Before(stop) {
					d, err := lims[w%instances].Allow(context.Background(), quota.Tenant{ID: "hot"}, "default", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
						if d.Local {
							local.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		bound := capacity + rate*elapsed + instances*size
		t.Logf("admitted %d (%d from leases) in %.3fs, bound %.1f", admitted.Load(), local.Load(), elapsed, bound)
		if a := float64(admitted.Load()); a > bound || a == 0 {
			t.Fatalf("admitted %v, want 0 < admitted <= %.2f", a, bound)
		}
		if local.Load() == 0 {
			t.Fatal("no request was admitted from a lease")
		}
	})
}

// TestLeasesCutCalls counts the server's script calls: with leases of at
// most 10, 200 admitted requests of a tenant far from its limit take 21
// store calls instead of 200 (the first check is plain: no demand is
// known yet).
func TestLeasesCutCalls(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1000, RefillPerSecond: 1}})
		ctx := context.Background()
		// cached first, so that no call fails NOSCRIPT and is counted twice
		if err := c.ScriptLoad(ctx, lua.TokenBucket()).Err(); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name     string
			opts     []core.Option
			min, max int64
		}{
			{"without", nil, 200, 200},
			{"with", []core.Option{core.WithLeases("default", 10, time.Minute)}, 21, 21},
		} {
			l := v.newLimiter(t, c, r, tc.opts...)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				if d := check(t, l, "t1", 1); !d.Allowed {
					t.Fatalf("%s leases: request %d denied: %+v", tc.name, i, d)
				}
			}
			if n := scriptCalls(t, c); n < tc.min || n > tc.max {
				t.Fatalf("%s leases: %d store calls for 200 requests, want %d to %d", tc.name, n, tc.min, tc.max)
			}
		}
	})
}

// TestLeaseArithmetic: a bucket set's first check is plain; a lease is a
// charge of its size, at most the largest size and half the balance the
// store last reported; its decisions count the unspent tokens; at expiry
// they are lost, not refunded; near empty a check is plain; a request
// larger than the largest lease, and a peek, go to the store.
func TestLeaseArithmetic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		clock := testkit.NewFakeClock()
		r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 0.001}})
		l := v.newLimiter(t, c, r, core.WithClock(clock.Now), core.WithLeases("default", 4, time.Second))
		if d := check(t, l, "t1", 1); !d.Allowed || d.Local || d.Remaining != 9 {
			t.Fatalf("first request: %+v, want a plain check", d)
		}
		d := check(t, l, "t1", 1) // the store gives 4 (of its 9): 5 left there, 3 in the lease
		if !d.Allowed || d.Local || d.Remaining != 8 {
			t.Fatalf("second request: %+v, want a lease of 4", d)
		}
		if p := check(t, l, "t1", 0); p.Local || !near(p.Tokens, 5, 1e-6) {
			t.Fatalf("peek after a lease of 4: %+v, want 5 tokens in the store", p)
		}
		for want := int64(7); want >= 5; want-- {
			if d := check(t, l, "t1", 1); !d.Allowed || !d.Local || d.Remaining != want {
				t.Fatalf("from the lease: %+v, want local, remaining %d", d, want)
			}
		}
		// the lease is spent: a new one of 2 (half the store's 5) is taken
		if d := check(t, l, "t1", 1); !d.Allowed || d.Local || d.Remaining != 4 {
			t.Fatalf("second lease: %+v, want remaining 4 (3 in the store, 1 leased)", d)
		}
		clock.Advance(2 * time.Second) // the lease expires unspent: its 1 is lost
		// the store holds 3.002: half of it is under 2, so the request is
		// charged alone
		if d := check(t, l, "t1", 1); !d.Allowed || d.Local || !near(d.Tokens, 2.002, 1e-6) {
			t.Fatalf("after expiry: %+v, want the store's 3.002 charged once", d)
		}
		if d := check(t, l, "t1", 5); d.Allowed || d.Local {
			t.Fatalf("a request larger than the lease: %+v, want a store denial", d)
		}
	})
}

// TestDenyCacheFloodSendsNothing: once one tenant is denied, a flood of its
// requests makes no store call (counted by the server) until the bound
// allows (here within the check timeout, which would end it too), then
// exactly the calls needed.
func TestDenyCacheFloodSendsNothing(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		c := srv.Client(t)
		clock := testkit.NewFakeClock()
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 0.5}}),
			core.WithClock(clock.Now), core.WithDenyCache(true), core.WithTimeout(5*time.Second))
		for range 5 {
			check(t, l, "flood", 1)
		}
		if d := check(t, l, "flood", 1); d.Allowed || d.Local {
			t.Fatalf("first denial: %+v, want one from the store", d)
		}
		if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var denied atomic.Int64
		for range 20 {
			wg.Go(func() {
				for range 100 {
					d, err := l.Allow(context.Background(), quota.Tenant{ID: "flood"}, "default", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed && d.Local {
						denied.Add(1)
					}
				}
			})
		}
		wg.Wait()
		clock.Advance(1900 * time.Millisecond) // 0.95 tokens: still below the cost
		if d := check(t, l, "flood", 1); d.Allowed || !d.Local {
			t.Fatalf("before the bound allows: %+v", d)
		}
		if n := scriptCalls(t, c); n != 0 || denied.Load() != 2000 {
			t.Fatalf("flood of 2000 denied requests: %d store calls, %d denied locally; want 0, 2000", n, denied.Load())
		}
		clock.Advance(100 * time.Millisecond) // 1 token: the store is asked again
		if d := check(t, l, "flood", 1); !d.Allowed || d.Local {
			t.Fatalf("when the bound allows: %+v, want admitted by the store", d)
		}
		if n := scriptCalls(t, c); n != 1 {
			t.Fatalf("%d store calls once the bound allowed, want 1", n)
		}
	})
}

// TestLeaseDenialIsOneCall: when the store cannot give a lease (another
// process drained the bucket since this replica last saw it) and holds
// less than the request's cost, the lease's reply is the request's denial:
// one store call, with the exact retry time. The next check knows the
// balance: a plain one, one call.
func TestLeaseDenialIsOneCall(t *testing.T) {
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.ScriptLoad(ctx, lua.TokenBucket()).Err(); err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewFakeClock()
	r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 20, RefillPerSecond: 0.5}})
	prefix := redistest.Prefix(t)
	l := newLimiter(t, c, r, core.WithPrefix(prefix), core.WithClock(clock.Now), core.WithLeases("default", 10, time.Minute))
	other := newLimiter(t, c, r, core.WithPrefix(prefix), core.WithClock(clock.Now))
	if d := check(t, l, "t1", 1); !d.Allowed || d.Local {
		t.Fatalf("first request: %+v", d)
	}
	if d := check(t, other, "t1", 19); !d.Allowed || !near(d.Tokens, 0, 1e-6) {
		t.Fatalf("the other process's drain: %+v", d)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second) // 0.5 tokens in the store: below the cost
	d := check(t, l, "t1", 1)  // a lease of 9 (half of 19 seen), refused
	if d.Allowed || d.Reason != core.ReasonOverLimit || d.Cost != 1 || !nearDur(d.RetryAfter, time.Second) || !near(d.Tokens, 0.5, 1e-6) {
		t.Fatalf("denial: %+v, want over limit for cost 1, 0.5 tokens, retry 1s", d)
	}
	if n := scriptCalls(t, c); n != 1 {
		t.Fatalf("%d store calls, want 1 (a refused lease that is the denial)", n)
	}
	clock.Advance(time.Second) // 1 token: too few for a lease, enough for the request
	if d := check(t, l, "t1", 1); !d.Allowed || d.Local || !near(d.Tokens, 0, 1e-6) {
		t.Fatalf("after refill: %+v, want the request charged alone", d)
	}
	if n := scriptCalls(t, c); n != 2 {
		t.Fatalf("%d store calls, want 2", n)
	}
}

// TestLeaseWaitersBoundedByTimeout: checks waiting for another check's
// lease acquisition never outlive the check timeout, even without a
// deadline of their own, while the store hangs (a paused redis-server).
func TestLeaseWaitersBoundedByTimeout(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		srv := redistest.NewServer(t)
		const timeout = 500 * time.Millisecond
		l, err := core.New(srv.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(100)}),
			append(v.options(), core.WithTimeout(timeout), core.WithLeases("default", 10, time.Second), core.WithCircuitBreaker(0, 0))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Resume() })
		var wg sync.WaitGroup
		var worst atomic.Int64
		for range 16 {
			wg.Go(func() {
				start := time.Now()
				d, err := l.Allow(context.Background(), quota.Tenant{ID: "hot"}, "default", 1)
				if err == nil || d.Reason != core.ReasonFailedOpen {
					t.Errorf("paused store: %v %v", d.Reason, err)
				}
				el := int64(time.Since(start))
				for {
					w := worst.Load()
					if el <= w || worst.CompareAndSwap(w, el) {
						break
					}
				}
			})
		}
		wg.Wait()
		// a waiter used to wait for the acquisition (one timeout), then
		// make its own call (a second one). Now it takes the acquisition's
		// answer: one timeout, then the probe that confirms the store is
		// silent (two timeouts), once for all
		if w := time.Duration(worst.Load()); w > 3*timeout+timeout/2 {
			t.Fatalf("a check took %v with a %v timeout", w, timeout)
		}
	})
}
