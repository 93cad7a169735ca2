package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// reports is the quota of the concurrency tests: a rate quota and 2 in
// flight.
var reports = quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 2}

func slotsKey(t *testing.T, l *core.Limiter, tenant, bucket string) string {
	t.Helper()
	k, err := l.Keys().Slots(tenant, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// waitFor polls cond every 10 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkClass(t *testing.T, l *core.Limiter, tenant, class string, cost int64) core.Decision {
	t.Helper()
	d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: tenant}, Class: class, Cost: cost})
	if err != nil {
		t.Fatalf("Check(%s, %s, cost %d): %v", tenant, class, cost, err)
	}
	return d
}

// TestConcurrencySlots: N requests hold the N slots; the next is denied
// with a reason of its own and charged nothing; a release frees a slot;
// releasing twice, or a nil slot, does nothing.
func TestConcurrencySlots(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		// a refill too slow to show between the checks of a loaded machine
		q := quota.Quota{Capacity: 100, RefillPerSecond: 0.001, Concurrency: 2}
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: q}))
		a := checkClass(t, l, "t1", "reports", 1)
		bb := checkClass(t, l, "t1", "reports", 1)
		if a.Reason != core.ReasonOK || bb.Reason != core.ReasonOK || a.Slot == nil || bb.Slot == nil {
			t.Fatalf("first two: %v %v, slots %v %v; want admitted with slots", a.Reason, bb.Reason, a.Slot, bb.Slot)
		}
		if a.Buckets[0].InFlight != 1 || bb.Buckets[0].InFlight != 2 {
			t.Fatalf("in flight %d, %d; want 1, 2", a.Buckets[0].InFlight, bb.Buckets[0].InFlight)
		}
		d := checkClass(t, l, "t1", "reports", 1)
		if d.Allowed || d.Reason != core.ReasonConcurrencyLimit || d.Slot != nil || render.Status(d) != 429 {
			t.Fatalf("third: %+v; want a concurrency denial, 429, no slot", d)
		}
		if !near(d.Tokens, bb.Tokens, 0.5) || d.Buckets[0].InFlight != 2 {
			t.Fatalf("denied for a slot: tokens %v (after the second %v), in flight %d; want nothing charged, 2", d.Tokens, bb.Tokens, d.Buckets[0].InFlight)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > time.Second {
			t.Fatalf("RetryAfter %v; want the 1 s hint", d.RetryAfter)
		}
		// another tenant is not affected
		if o := checkClass(t, l, "t2", "reports", 1); o.Reason != core.ReasonOK {
			t.Fatalf("other tenant: %v", o.Reason)
		}
		a.Slot.Release()
		a.Slot.Release()
		var none *core.Slot
		none.Release()
		key := slotsKey(t, l, "t1", "reports")
		// Release returned: the store has already removed the slot
		if n := c.ZCard(context.Background(), key).Val(); n != 1 {
			t.Fatalf("%d slots held after a release returned; want 1", n)
		}
		e := checkClass(t, l, "t1", "reports", 1)
		if e.Reason != core.ReasonOK || e.Buckets[0].InFlight != 2 {
			t.Fatalf("after a release: %v in flight %d; want admitted, 2", e.Reason, e.Buckets[0].InFlight)
		}
		bb.Slot.Release()
		e.Slot.Release()
		waitFor(t, 5*time.Second, "releases", func() bool { return c.ZCard(context.Background(), key).Val() == 0 })
	})
}

// TestConcurrencyAllOrNothing: a request denied by a bucket takes no slot;
// one denied for lack of a slot takes no token.
func TestConcurrencyAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		q := quota.Quota{Capacity: 2, RefillPerSecond: 0.01, Concurrency: 5}
		ceiling := quota.Quota{Capacity: 50, RefillPerSecond: 0.001}
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: q}, quota.Bucket{Name: quota.CeilingBucket, Quota: ceiling}))
		key := slotsKey(t, l, "t1", "reports")
		for i := 0; i < 2; i++ {
			if d := checkClass(t, l, "t1", "reports", 1); d.Reason != core.ReasonOK || d.Slot == nil {
				t.Fatalf("request %d: %v", i, d.Reason)
			}
		}
		d := checkClass(t, l, "t1", "reports", 1)
		if d.Reason != core.ReasonOverLimit || d.Slot != nil {
			t.Fatalf("third: %v; want over limit", d.Reason)
		}
		if n := c.ZCard(context.Background(), key).Val(); n != 2 {
			t.Fatalf("slots held after a bucket's denial: %d; want 2", n)
		}
		// the ceiling kept its balance: the denial charged nothing
		if got := d.Buckets[1].Tokens; !near(got, 48, 0.1) {
			t.Fatalf("ceiling tokens %v; want 48", got)
		}
	})
}

// TestConcurrencyExpiry: a slot whose holder died (written here as the
// script writes one, with a deadline and no renewal) stops counting at its
// deadline; the denial's retry hint is at most the time until then.
func TestConcurrencyExpiry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: reports}), core.WithConcurrencySlots(6*time.Second, 0))
		key := slotsKey(t, l, "t1", "reports")
		ctx := context.Background()
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		const ahead = 3 * time.Second // the first check comes well before it, even on a loaded machine
		dead := now.Add(ahead).UnixMicro()
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(dead), Member: "dead-1"}, redis.Z{Score: float64(dead), Member: "dead-2"}).Err(); err != nil {
			t.Fatal(err)
		}
		d := checkClass(t, l, "t1", "reports", 1)
		if d.Reason != core.ReasonConcurrencyLimit || d.RetryAfter <= 0 || d.RetryAfter > ahead {
			t.Fatalf("with two dead holders: %v, retry %v; want a denial, retry within %v", d.Reason, d.RetryAfter, ahead)
		}
		waitFor(t, ahead+10*time.Second, "the dead slots' expiry", func() bool {
			d = checkClass(t, l, "t1", "reports", 1)
			return d.Reason == core.ReasonOK
		})
		defer d.Slot.Release()
		if d.Buckets[0].InFlight != 1 {
			t.Fatalf("in flight after expiry: %d; want 1 (the dead slots reclaimed)", d.Buckets[0].InFlight)
		}
		if members := c.ZRange(ctx, key, 0, -1).Val(); len(members) != 1 {
			t.Fatalf("slot set %v; want only the new slot", members)
		}
	})
}

// TestConcurrencyRenewal: a slot held longer than its lease is renewed, so
// it keeps counting; released, it is gone.
func TestConcurrencyRenewal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		// renewed every 500 ms: a renewal may be a second late on a
		// loaded machine before the slot expires
		lease := 1500 * time.Millisecond
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 1}}),
			core.WithTimeout(lease/3), core.WithConcurrencySlots(lease, 0))
		key := slotsKey(t, l, "t1", "reports")
		ctx := context.Background()
		d := checkClass(t, l, "t1", "reports", 1)
		if d.Slot == nil {
			t.Fatalf("first: %v", d.Reason)
		}
		first := c.ZRangeWithScores(ctx, key, 0, -1).Val()
		time.Sleep(2 * lease)
		if o := checkClass(t, l, "t1", "reports", 1); o.Reason != core.ReasonConcurrencyLimit {
			t.Fatalf("after two leases held: %v; want the slot still counted", o.Reason)
		}
		later := c.ZRangeWithScores(ctx, key, 0, -1).Val()
		if len(first) != 1 || len(later) != 1 || later[0].Score <= first[0].Score+float64(lease.Microseconds()) {
			t.Fatalf("deadlines %v then %v; want the deadline moved by renewal", first, later)
		}
		d.Slot.Release()
		waitFor(t, 5*time.Second, "release", func() bool { return c.Exists(ctx, key).Val() == 0 || c.ZCard(ctx, key).Val() == 0 })
	})
}

// TestConcurrencyReset: Reset frees every slot, and a renewal then finds
// its slot gone rather than reviving it.
func TestConcurrencyReset(t *testing.T) {
	c := backends[0].client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: reports}))
	for i := 0; i < 2; i++ {
		if d := checkClass(t, l, "t1", "reports", 1); d.Slot == nil {
			t.Fatalf("request %d: %v", i, d.Reason)
		}
	}
	for _, names := range [][]string{{"reports"}, nil} {
		n, err := l.Reset(context.Background(), quota.Tenant{ID: "t1"}, names...)
		if err != nil || n == 0 {
			t.Fatalf("Reset(%v): %d, %v", names, n, err)
		}
		if d := checkClass(t, l, "t1", "reports", 1); d.Reason != core.ReasonOK {
			t.Fatalf("after Reset(%v): %v", names, d.Reason)
		} else {
			defer d.Slot.Release()
		}
	}
}

// TestConcurrencyPeek: a peek reports the slots in use and takes none.
func TestConcurrencyPeek(t *testing.T) {
	c := backends[0].client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: reports}))
	d := checkClass(t, l, "t1", "reports", 1)
	defer d.Slot.Release()
	for i := 0; i < 3; i++ {
		p, err := l.Peek(context.Background(), quota.Tenant{ID: "t1"}, "reports")
		if err != nil || p.Reason != core.ReasonOK || p.Slot != nil || p.Buckets[0].InFlight != 1 {
			t.Fatalf("peek: %+v, %v; want 1 in flight, no slot", p, err)
		}
	}
}

// TestConcurrencyPeak: many goroutines of one tenant; the handlers
// themselves record how many run at once, never more than N, and N is
// reached.
func TestConcurrencyPeak(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		const n = 3
		l := v.newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "reports", Quota: quota.Quota{Capacity: 1 << 20, RefillPerSecond: 1 << 20, Concurrency: n}}))
		var running, peak, admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "reports", Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						time.Sleep(2 * time.Millisecond)
						continue
					}
					admitted.Add(1)
					r := running.Add(1)
					for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					running.Add(-1)
					d.Slot.Release()
				}
			}()
		}
		wg.Wait()
		if p := peak.Load(); p > n || p < n {
			t.Fatalf("peak in flight %d (of %d admitted); want exactly %d", p, admitted.Load(), n)
		}
	})
}

// TestConcurrencyTwoLimits: two buckets of one request with a concurrency
// limit are a configuration mistake, answered as unresolved.
func TestConcurrencyTwoLimits(t *testing.T) {
	c := backends[0].client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: reports}, quota.Bucket{Name: quota.CeilingBucket, Quota: reports}))
	d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "reports", Cost: 1})
	if !errors.Is(err, quota.ErrInvalid) || d.Reason != core.ReasonUnresolved || d.Allowed {
		t.Fatalf("two limits: %v, %v; want ErrInvalidQuota, unresolved", d.Reason, err)
	}
	if _, err := core.New(c, staticResolver(), core.WithTimeout(time.Second), core.WithConcurrencySlots(2*time.Second, 0)); err == nil {
		t.Fatal("a lease shorter than 3 timeouts accepted")
	}
	if _, err := core.New(c, staticResolver(), core.WithConcurrencySlots(time.Second, 2*time.Second)); err == nil {
		t.Fatal("a retry hint longer than the lease accepted")
	}
}

// TestConcurrencyReleaseUnreachable: a release while the store does not
// answer is retried while the lease runs: back within it, the slot is
// removed; gone for longer, the slot is left to expire, counted, and
// reclaimed by the next admission. The held gauge returns to 0 either way;
// a store failure at the check follows the failure policy and takes no
// slot.
func TestConcurrencyReleaseUnreachable(t *testing.T) {
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	const timeout, lease = 400 * time.Millisecond, 2 * time.Second
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "reports", Quota: quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 1}}),
		core.WithTimeout(timeout), core.WithConcurrencySlots(lease, 0), core.WithMeterProvider(mp), core.WithCircuitBreaker(0, 0))
	key := slotsKey(t, l, "t1", "reports")
	ctx := context.Background()
	held := func() int64 { return collect(t, reader, "tollgate.slots.held")[""] }
	expired := func() int64 { return collect(t, reader, "tollgate.slots.expired", "cause")["release_failed"] }

	// a pause shorter than the lease: the retried release gets through
	d := checkClass(t, l, "t1", "reports", 1)
	if d.Slot == nil || held() != 1 {
		t.Fatalf("first: %v, held %d", d.Reason, held())
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	d.Slot.Release()
	time.Sleep(3 * timeout)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lease+10*timeout, "the retried release", func() bool { return c.ZCard(ctx, key).Val() == 0 })
	waitFor(t, 10*timeout, "the held gauge", func() bool { return held() == 0 })
	if n := expired(); n != 0 {
		t.Fatalf("expired %d after a release that got through", n)
	}

	// a pause longer than the lease: left to expire, counted, reclaimed
	d = checkClass(t, l, "t1", "reports", 1)
	if d.Slot == nil {
		t.Fatalf("second: %v", d.Reason)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	d.Slot.Release()
	waitFor(t, 2*lease+10*timeout, "the release given up", func() bool { return expired() == 1 })
	// the check itself fails open while the store is silent: no slot
	if f, err := l.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "reports", Cost: 1}); err == nil || f.Reason != core.ReasonFailedOpen || f.Slot != nil {
		t.Fatalf("check while paused: %v, %v, slot %v; want failed open without a slot", f.Reason, err, f.Slot)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*lease, "the unreleased slot's expiry", func() bool {
		d = checkClass(t, l, "t1", "reports", 1)
		return d.Reason == core.ReasonOK
	})
	d.Slot.Release()
	if held() > 1 {
		t.Fatalf("held %d", held())
	}
}

// TestConcurrencyForget drives the concurrency script's Forget (the slot of
// a check whose answer was not delivered) on real Redis, standalone and
// Cluster, on its own clock: either order of take and forget leaves no
// slot and the limit free; a take that comes after its forget takes
// nothing and charges nothing; a forget sent twice (a retry) is the same as
// once; the tombstone counts for nothing, and lives one lease, after which
// an admission removes it.
func TestConcurrencyForget(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.client(t)
			ctx := context.Background()
			src := lua.Concurrency()
			ks, err := keys.New(redistest.Prefix(t))
			if err != nil {
				t.Fatal(err)
			}
			const lease = 1_000_000 // µs
			take := func(tenant, id string, now int64) []any {
				t.Helper()
				bk, err := ks.Bucket(tenant, "reports")
				if err != nil {
					t.Fatal(err)
				}
				v, err := c.Eval(ctx, src, []string{bk, bk + ":slots"}, now, 1, 100, 1, 60000, 1, lease, id, 61000).Slice()
				if err != nil {
					t.Fatalf("take %s: %v", id, err)
				}
				return v
			}
			forget := func(tenant, id string, now int64) int64 {
				t.Helper()
				sk, _ := ks.Slots(tenant, "reports")
				n, err := c.Eval(ctx, src, []string{sk}, now, id, lease, 61000, "forget").Int64()
				if err != nil {
					t.Fatalf("forget %s: %v", id, err)
				}
				return n
			}
			members := func(tenant string) []redis.Z {
				sk, _ := ks.Slots(tenant, "reports")
				return c.ZRangeWithScores(ctx, sk, 0, -1).Val()
			}
			for _, k := range []string{"f1", "f2"} {
				sk, _ := ks.Slots(k, "reports")
				bk, _ := ks.Bucket(k, "reports")
				t.Cleanup(func() { c.Del(context.Background(), sk); c.Del(context.Background(), bk) })
			}
			const t0 = 1_000_000_000

			// forgotten first: the late take takes nothing, charges nothing
			if n := forget("f1", "late", t0); n != 0 {
				t.Fatalf("forget before the take: %d; want 0", n)
			}
			if n := forget("f1", "late", t0+1); n != 0 {
				t.Fatalf("forget retried: %d; want 0", n)
			}
			if z := members("f1"); len(z) != 1 || z[0].Member != "late" || z[0].Score >= 0 {
				t.Fatalf("after the forget: %v; want one tombstone with a negative score", z)
			}
			if r := take("f1", "late", t0+2); r[0] != int64(0) || r[1] != int64(3) {
				t.Fatalf("the take after its forget: %v; want refused, reason 3", r)
			}
			bk, _ := ks.Bucket("f1", "reports")
			if n := c.Exists(ctx, bk).Val(); n != 0 {
				t.Fatalf("the refused take wrote its bucket")
			}
			// the tombstone does not count: the one slot is free
			if r := take("f1", "other", t0+3); r[0] != int64(1) || r[3] != int64(1) {
				t.Fatalf("a take beside the tombstone: %v; want admitted, 1 held", r)
			}
			if n := forget("f1", "other", t0+4); n != 1 {
				t.Fatalf("forget of a slot taken: %d; want 1", n)
			}
			// the tombstone outlives its lease only until an admission
			if r := take("f1", "third", t0+1+lease+1); r[0] != int64(1) {
				t.Fatalf("a take after the lease: %v", r)
			}
			for _, z := range members("f1") {
				if z.Member == "late" {
					t.Fatalf("the tombstone is still there a lease after its forget: %v", members("f1"))
				}
			}

			// taken first: the forget removes it, and leaves no tombstone
			if r := take("f2", "early", t0); r[0] != int64(1) {
				t.Fatalf("take: %v", r)
			}
			if r := take("f2", "next", t0+1); r[1] != int64(3) {
				t.Fatalf("a second take with one slot held: %v; want reason 3", r)
			}
			if n := forget("f2", "early", t0+2); n != 1 {
				t.Fatalf("forget after the take: %d; want 1", n)
			}
			if z := members("f2"); len(z) != 0 {
				t.Fatalf("after the forget of a slot taken: %v; want an empty set", z)
			}
			if r := take("f2", "next", t0+3); r[0] != int64(1) {
				t.Fatalf("a take after the forget: %v; want admitted", r)
			}
		})
	}
}
