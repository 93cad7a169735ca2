package core_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// step is one call in an arithmetic scenario: advance the clock, then check.
type step struct {
	advance time.Duration
	cost    int64
}

// want is the expected decision of a scenario's last step.
type want struct {
	reason     core.Reason
	tokens     float64 // exact balance after the step
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// TestArithmetic pins the token-bucket arithmetic (docs/semantics.md): cost,
// denial, flooring, refill, "never", exact retry, clock steps and extreme
// quotas, in client-clock mode so that time is exact.
func TestArithmetic(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	tests := []struct {
		name  string
		quota quota.Quota
		steps []step
		want  want
	}{
		{"allowed charges cost", q, []step{{0, 3}},
			want{core.ReasonOK, 7, 7, 0, 1500 * time.Millisecond}},
		{"denied consumes nothing", q, []step{{0, 8}, {0, 5}},
			want{core.ReasonOverLimit, 2, 2, 1500 * time.Millisecond, 4 * time.Second}},
		{"denial left the bucket intact", q, []step{{0, 8}, {0, 5}, {0, 2}},
			want{core.ReasonOK, 0, 0, 0, 5 * time.Second}},
		{"remaining is floored", q, []step{{0, 10}, {1250 * time.Millisecond, 1}},
			want{core.ReasonOK, 1.5, 1, 0, 4250 * time.Millisecond}},
		{"refill is capped at capacity", q, []step{{0, 10}, {time.Hour, 0}},
			want{core.ReasonOK, 10, 10, 0, 0}},
		{"cost exceeds capacity is never", q, []step{{0, 11}},
			want{core.ReasonCostExceedsCapacity, 10, 10, 0, 0}},
		{"never charges nothing", q, []step{{0, 4}, {0, 11}},
			want{core.ReasonCostExceedsCapacity, 6, 6, 0, 2 * time.Second}},
		{"retry is exact", q, []step{{0, 10}, {0, 1}},
			want{core.ReasonOverLimit, 0, 0, 500 * time.Millisecond, 5 * time.Second}},
		{"retry counts down", q, []step{{0, 10}, {499 * time.Millisecond, 1}},
			want{core.ReasonOverLimit, 0.998, 0, time.Millisecond, 4501 * time.Millisecond}},
		{"admitted when retry has passed", q, []step{{0, 10}, {499 * time.Millisecond, 1}, {time.Millisecond, 1}},
			want{core.ReasonOK, 0, 0, 0, 5 * time.Second}},
		{"clock step back mints nothing", q, []step{{0, 10}, {-10 * time.Second, 1}},
			want{core.ReasonOverLimit, 0, 0, 500 * time.Millisecond, 5 * time.Second}},
		{"clock step back is not counted twice", q, []step{{0, 10}, {-10 * time.Second, 0}, {10 * time.Second, 1}},
			want{core.ReasonOverLimit, 0, 0, 500 * time.Millisecond, 5 * time.Second}},
		{"clock step back burns nothing", q, []step{{0, 4}, {-time.Hour, 0}},
			want{core.ReasonOK, 6, 6, 0, 2 * time.Second}},
		{"huge capacity keeps integer precision", quota.Quota{Capacity: quota.MaxCapacity, RefillPerSecond: 1e7}, []step{{0, 1}}, want{core.ReasonOK, quota.MaxCapacity - 1, quota.MaxCapacity - 1, 0, 100 * time.Nanosecond}},
		{"huge capacity drains exactly", quota.Quota{Capacity: quota.MaxCapacity, RefillPerSecond: 1e7}, []step{{0, quota.MaxCapacity - 3}, {0, 4}}, want{core.ReasonOverLimit, 3, 3, 100 * time.Nanosecond, 109951162777600 * time.Nanosecond}},
		{"tiny rate waits long", quota.Quota{Capacity: 1, RefillPerSecond: 1.0 / (399 * 86400)}, []step{{0, 1}, {399 * 12 * time.Hour, 1}},
			want{core.ReasonOverLimit, 0.5, 0, 399 * 12 * time.Hour, 399 * 12 * time.Hour}},
		{"long idle gap refills to full", quota.Quota{Capacity: 5, RefillPerSecond: 0.001}, []step{{0, 5}, {300 * 24 * time.Hour, 0}}, want{core.ReasonOK, 5, 5, 0, 0}},
	}
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				clock := testkit.NewFakeClock()
				l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: tt.quota}), core.WithClock(clock.Now))
				var d core.Decision
				for _, s := range tt.steps {
					clock.Advance(s.advance)
					d = check(t, l, "t42", s.cost)
				}
				w := tt.want
				if d.Reason != w.reason || d.Allowed != (w.reason == core.ReasonOK) {
					t.Fatalf("reason = %v (allowed %v), want %v", d.Reason, d.Allowed, w.reason)
				}
				if !near(d.Tokens, w.tokens, 1e-6) || d.Remaining != w.remaining {
					t.Errorf("tokens = %v, remaining = %d; want %v, %d", d.Tokens, d.Remaining, w.tokens, w.remaining)
				}
				// durations: exact to the microsecond (the script's time unit)
				if !nearDur(d.RetryAfter, w.retryAfter) || !nearDur(d.ResetAfter, w.resetAfter) {
					t.Errorf("retry = %v, reset = %v; want %v, %v", d.RetryAfter, d.ResetAfter, w.retryAfter, w.resetAfter)
				}
				if d.Limit != tt.quota.Capacity || d.Bucket != "default" || d.Quota != tt.quota {
					t.Errorf("limit/policy/quota = %d/%q/%v", d.Limit, d.Bucket, d.Quota)
				}
			})
		}
	})
}

func nearDur(a, b time.Duration) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= time.Microsecond || float64(d) <= 1e-9*float64(b)
}

// stored reads a bucket's raw state from Redis: tokens and the stamp.
func stored(t *testing.T, c redis.UniversalClient, key string) (tokens float64, found bool) {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	f := strings.Fields(v)
	if len(f) != 2 {
		t.Fatalf("GET %s = %q, want \"<tokens> <stamp>\"", key, v)
	}
	tok, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatalf("GET %s = %q: %v", key, v, err)
	}
	return tok, true
}

func TestStorageAndTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: q}))
		key, err := l.Keys().Bucket("t42", "default")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(key, ":{t42}:default") {
			t.Fatalf("key = %q, want <prefix>:{t42}:default", key)
		}
		check(t, l, "t42", 0)
		if _, found := stored(t, c, key); found {
			t.Fatal("a peek (cost 0) wrote the bucket")
		}
		check(t, l, "t42", 4)
		tok, found := stored(t, c, key)
		if !found || !near(tok, 6, 0.01) {
			t.Fatalf("stored tokens = %v (found %v), want ~6", tok, found)
		}
		ttl, err := c.PTTL(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// capacity/rate = 5 s, plus 1 s of margin
		if ttl <= 5*time.Second || ttl > 6*time.Second {
			t.Fatalf("PTTL = %v, want in (5s, 6s]", ttl)
		}
		if n, err := l.Reset(context.Background(), quota.Tenant{ID: "t42"}); err != nil || n != 1 {
			t.Fatalf("Reset = %d, %v; want 1 key deleted", n, err)
		}
		if _, found := stored(t, c, key); found {
			t.Fatal("Reset left the bucket")
		}
	})
}

// TestMultiBucket: a tenant-wide ceiling and a class bucket are charged
// together or not at all, and the binding bucket is reported.
func TestMultiBucket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		clock := testkit.NewFakeClock()
		class := quota.Bucket{Name: "export", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 1}}
		ceiling := quota.Bucket{Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: 5, RefillPerSecond: 1}}
		l := v.newLimiter(t, c, staticResolver(class, ceiling), core.WithClock(clock.Now))
		ctx := context.Background()
		req := core.Request{Tenant: quota.Tenant{ID: "t{1}:x"}, Class: "export", Cost: 3}
		d, err := l.Check(ctx, req)
		if err != nil || !d.Allowed || d.Bucket != quota.CeilingBucket || d.Remaining != 2 {
			t.Fatalf("first = %+v, %v; want allowed, binding tenant with 2 left", d, err)
		}
		if len(d.Buckets) != 2 || d.Buckets[0].Tokens != 7 || d.Buckets[1].Tokens != 2 {
			t.Fatalf("bucket states = %+v", d.Buckets)
		}
		d, err = l.Check(ctx, req)
		if err != nil || d.Allowed || d.Reason != core.ReasonOverLimit || d.Bucket != quota.CeilingBucket {
			t.Fatalf("second = %+v, %v; want denied by the ceiling", d, err)
		}
		if d.RetryAfter != time.Second {
			t.Fatalf("retry = %v, want 1s", d.RetryAfter)
		}
		classKey, _ := l.Keys().Bucket(req.Tenant.ID, "export")
		ceilKey, _ := l.Keys().Bucket(req.Tenant.ID, quota.CeilingBucket)
		if tok, _ := stored(t, c, classKey); tok != 7 {
			t.Fatalf("class bucket = %v after a denial by the ceiling, want 7 (untouched)", tok)
		}
		if tok, _ := stored(t, c, ceilKey); tok != 2 {
			t.Fatalf("ceiling bucket = %v, want 2", tok)
		}
		// the class denies a cost of 8 while... a never answer wins over over-limit
		req.Cost = 6
		d, _ = l.Check(ctx, req)
		if d.Reason != core.ReasonCostExceedsCapacity || d.Bucket != quota.CeilingBucket {
			t.Fatalf("cost 6 > ceiling capacity 5: %+v", d)
		}
		// the bucket with the longest wait binds
		clock.Advance(3 * time.Second) // class 10, ceiling 5
		req.Cost = 5
		if d, _ = l.Check(ctx, req); !d.Allowed {
			t.Fatalf("cost 5 after refill: %+v", d)
		}
		req.Cost = 4 // class 5 left, ceiling 0: ceiling needs 4 s, class admits
		if d, _ = l.Check(ctx, req); d.Allowed || d.Bucket != quota.CeilingBucket || d.RetryAfter != 4*time.Second {
			t.Fatalf("binding = %+v, want ceiling with 4s", d)
		}
	})
}

// TestAlsoClasses: several classes of one tenant in one request are decided
// in one script call, all charged or none; a shared ceiling is charged once.
func TestAlsoClasses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		clock := testkit.NewFakeClock()
		ceiling := quota.Quota{Capacity: 100, RefillPerSecond: 1}
		res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 10, RefillPerSecond: 1},
			"export":  {Capacity: 3, RefillPerSecond: 1},
		}, Ceiling: &ceiling}}})
		if err != nil {
			t.Fatal(err)
		}
		l := v.newLimiter(t, c, res, core.WithClock(clock.Now))
		ctx := context.Background()
		req := core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "default", Also: []string{"export"}, Cost: 2}
		d, err := l.Check(ctx, req)
		if err != nil || !d.Allowed || len(d.Buckets) != 3 {
			t.Fatalf("first = %+v, %v; want allowed over 3 buckets", d, err)
		}
		if d.Bucket != "export" || d.Remaining != 1 {
			t.Fatalf("binding = %s with %d left, want export with 1", d.Bucket, d.Remaining)
		}
		d, err = l.Check(ctx, req) // export has 1 < 2: nothing is charged
		if err != nil || d.Allowed || d.Reason != core.ReasonOverLimit || d.Bucket != "export" {
			t.Fatalf("second = %+v, %v; want denied by export", d, err)
		}
		for name, want := range map[string]float64{"default": 8, "export": 1, quota.CeilingBucket: 98} {
			key, _ := l.Keys().Bucket("t1", name)
			if tok, _ := stored(t, c, key); tok != want {
				t.Errorf("%s = %v after a denial, want %v (charged once by the first request only)", name, tok, want)
			}
		}
		if _, err := l.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "default", Also: []string{"bad name"}, Cost: 1}); !errors.Is(err, core.ErrInvalidRequest) {
			t.Errorf("an invalid extra class: err = %v, want ErrInvalidRequest", err)
		}
		if _, err := l.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "default", Also: []string{"nosuch"}, Cost: 1}); !errors.Is(err, core.ErrResolve) {
			t.Errorf("an unknown extra class: err = %v, want ErrResolve", err)
		}
	})
}

// TestAlsoKeepsResolverSlice: a resolver may return one slice to every
// caller; adding another class's buckets must not write into it.
func TestAlsoKeepsResolverSlice(t *testing.T) {
	shared := make([]quota.Bucket, 1, 4) // spare capacity, as a table's slice may have
	shared[0] = quota.Bucket{Name: "default", Quota: quota.PerSecond(10)}
	export := []quota.Bucket{{Name: "export", Quota: quota.PerSecond(10)}}
	r := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
		if class == "export" {
			return export, nil
		}
		return shared, nil
	})
	l := newLimiter(t, redistest.Client(t), r)
	d, err := l.Check(context.Background(), core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "default", Also: []string{"export"}, Cost: 1})
	if err != nil || len(d.Buckets) != 2 {
		t.Fatalf("Check = %+v, %v", d, err)
	}
	if spare := shared[:2][1]; spare != (quota.Bucket{}) {
		t.Fatalf("the resolver's slice was written: %+v", spare)
	}
}

// TestConcurrentAtomicity is the design's concurrency test: many parallel
// checks on one key never admit more than capacity + rate * elapsed.
func TestConcurrentAtomicity(t *testing.T) {
	for _, b := range backends {
		for _, v := range variants {
			for _, instances := range []int{1, 4} {
				t.Run(b.name+"/"+v.name+"/instances="+strconv.Itoa(instances), func(t *testing.T) {
					const capacity, rate, total, workers = 10, 2.0, 500, 50
					prefix := redistest.Prefix(t)
					r := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: capacity, RefillPerSecond: rate}})
					lims := make([]*core.Limiter, instances)
					for i := range lims {
						// separate clients: separate "replicas"
						l, err := core.New(b.client(t), r, append([]core.Option{core.WithPrefix(prefix), core.WithTimeout(5 * time.Second)}, v.opts...)...)
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { _ = l.Close() })
						lims[i] = l
					}
					var admitted, next atomic.Int64
					var wg sync.WaitGroup
					start := time.Now()
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for next.Add(1) <= total {
								d, err := lims[w%instances].Allow(context.Background(), quota.Tenant{ID: "hot"}, "default", 1)
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									admitted.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					elapsed := time.Since(start).Seconds()
					bound := capacity + rate*elapsed
					t.Logf("admitted %d of %d in %.3fs (bound %.1f)", admitted.Load(), total, elapsed, bound)
					if a := float64(admitted.Load()); a > bound || a == 0 {
						t.Fatalf("admitted %v, want 0 < admitted <= %.2f", a, bound)
					}
				})
			}
		}
	}
}

func TestScriptFlushReloads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		// a slow refill: a loaded machine may take 10 ms between the checks
		q := quota.Quota{Capacity: 100, RefillPerSecond: 0.01}
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: q}))
		check(t, l, "t1", 1)
		flushScripts(t, c)
		if d := check(t, l, "t1", 1); !d.Allowed || d.Remaining != 98 {
			t.Fatalf("after SCRIPT FLUSH: %+v", d)
		}
	})
}

func TestRedisRestart(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		s := redistest.NewServer(t)
		l := v.newLimiter(t, s.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(100)}))
		check(t, l, "t1", 1)
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		// the first call after a restart may meet a dead pooled connection;
		// the limiter never replays it, so allow one failed-open answer
		var d core.Decision
		var err error
		for range 3 {
			if d, err = l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1); err == nil {
				break
			}
		}
		if err != nil || !d.Allowed || d.Reason != core.ReasonOK || d.Remaining != 99 {
			t.Fatalf("after restart: %+v, %v (want a fresh bucket: data and scripts were lost)", d, err)
		}
	})
}

// TestRedisDown: with nothing listening, each policy answers within the
// timeout, with ErrStore.
func TestRedisDown(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		s := redistest.NewServer(t)
		c := s.Client(t)
		s.Kill()
		for _, tc := range []struct {
			policy core.FailurePolicy
			reason core.Reason
			status int
		}{{core.FailOpen, core.ReasonFailedOpen, 200}, {core.FailClosed, core.ReasonFailedClosed, 503}} {
			t.Run(tc.policy.String(), func(t *testing.T) {
				l, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1)}),
					append(v.options(), core.WithFailurePolicy(tc.policy), core.WithTimeout(200*time.Millisecond))...)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				d, err := l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
				took := time.Since(start)
				if !errors.Is(err, core.ErrStore) || d.Reason != tc.reason || render.Status(d) != tc.status || !d.Degraded() {
					t.Fatalf("decision %+v (status %d), err %v; want %v, %d, ErrStore", d, render.Status(d), err, tc.reason, tc.status)
				}
				if len(render.Headers(d, render.DefaultHeaderStyle, time.Now())) != 0 {
					t.Fatal("a degraded decision carries rate-limit headers")
				}
				if took > time.Second {
					t.Fatalf("took %v with a 200ms timeout", took)
				}
			})
		}
	})
}

// TestRedisHung: a paused server (SIGSTOP) answers nothing; the check still
// returns within its timeout, even on a client that ignores context
// deadlines.
func TestRedisHung(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		s := redistest.NewServer(t)
		c := s.Client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
		l, err := core.New(c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1)}),
			append(v.options(), core.WithFailurePolicy(core.FailClosed), core.WithTimeout(100*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		check(t, l, "t1", 0) // warm the connection and the script cache
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d, err := l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
		took := time.Since(start)
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, core.ErrStore) || d.Reason != core.ReasonFailedClosed {
			t.Fatalf("hung Redis: %+v, %v", d, err)
		}
		if took > 1500*time.Millisecond { // the timeout, then the probe (1 s at the most)
			t.Fatalf("took %v with a 100ms timeout", took)
		}
	})
}

func TestServerClockBurst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, v variant) {
		c := b.client(t)
		l := v.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 0.01}}))
		for i := range 5 {
			if d := check(t, l, "t1", 1); !d.Allowed || d.Remaining != int64(4-i) {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		d := check(t, l, "t1", 1)
		if d.Allowed || d.Reason != core.ReasonOverLimit || d.RetryAfter < 99*time.Second || d.RetryAfter > 100*time.Second {
			t.Fatalf("6th: %+v", d)
		}
		// tenants are isolated
		if d := check(t, l, "t2", 1); !d.Allowed || d.Remaining != 4 {
			t.Fatalf("other tenant: %+v", d)
		}
	})
}

func TestShadow(t *testing.T) {
	c := redistest.Client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 0.01}}), core.WithShadow(true))
	check(t, l, "t1", 1)
	d := check(t, l, "t1", 1)
	if !d.Allowed || d.Reason != core.ReasonShadowDenied || render.Status(d) != 200 {
		t.Fatalf("shadow: %+v", d)
	}
}

func TestShadowClasses(t *testing.T) {
	c := redistest.Client(t)
	q := quota.Quota{Capacity: 1, RefillPerSecond: 0.01}
	l := newLimiter(t, c, quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: class, Quota: q}}, nil
	}), core.WithShadowClasses("export"))
	ctx := context.Background()
	for _, class := range []string{"export", "default"} {
		_, _ = l.Allow(ctx, quota.Tenant{ID: "t1"}, class, 1)
	}
	if d, _ := l.Allow(ctx, quota.Tenant{ID: "t1"}, "export", 1); !d.Allowed || d.Reason != core.ReasonShadowDenied {
		t.Fatalf("shadowed class: %+v", d)
	}
	if d, _ := l.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 1); d.Allowed || d.Reason != core.ReasonOverLimit {
		t.Fatalf("enforced class: %+v", d)
	}
}

func TestInvalidInput(t *testing.T) {
	c := redistest.Client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1)}))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  core.Request
		want string
	}{
		{"empty tenant", core.Request{Cost: 1}, "tenant ID is empty"},
		{"long tenant", core.Request{Tenant: quota.Tenant{ID: strings.Repeat("x", 257)}, Cost: 1}, "longer than 256"},
		{"negative cost", core.Request{Tenant: quota.Tenant{ID: "t"}, Cost: -1}, "cost must be"},
		{"bad class", core.Request{Tenant: quota.Tenant{ID: "t"}, Class: "a b", Cost: 1}, "bucket name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := l.Check(ctx, tc.req)
			if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) || d.Reason != core.ReasonInvalid || d.Allowed {
				t.Fatalf("got %+v, %v; want ReasonInvalid and an error naming %q", d, err, tc.want)
			}
		})
	}
	// a resolver answering an invalid quota is a configuration mistake:
	// rejected (500), never let through unlimited, even when failing open
	bad := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: math.NaN()}}))
	d, err := bad.Allow(ctx, quota.Tenant{ID: "t"}, "default", 1)
	if !errors.Is(err, quota.ErrInvalid) || !strings.Contains(err.Error(), "refill rate") || d.Reason != core.ReasonUnresolved || d.Allowed || render.Status(d) != 500 {
		t.Fatalf("NaN rate: %+v, %v", d, err)
	}
	// so is an unknown tier or class
	res, err := quota.NewResolver(testTiers)
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, c, res)
	for _, req := range []core.Request{
		{Tenant: quota.Tenant{ID: "t", Tier: "platinum"}, Class: "default", Cost: 1},
		{Tenant: quota.Tenant{ID: "t", Tier: "free"}, Class: "nosuchclass", Cost: 1},
	} {
		d, err := lim.Check(ctx, req)
		if !errors.Is(err, core.ErrResolve) || d.Allowed || d.Reason != core.ReasonUnresolved {
			t.Fatalf("%+v: %+v, %v; want rejected as unresolved", req, d, err)
		}
	}
	// a custom resolver whose own backend fails is a store failure: policy
	broken := newLimiter(t, c, quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return nil, errors.New("quota service unreachable")
	}), core.WithFailurePolicy(core.FailClosed))
	if d, err := broken.Allow(ctx, quota.Tenant{ID: "t"}, "default", 1); !errors.Is(err, core.ErrStore) || d.Reason != core.ReasonFailedClosed {
		t.Fatalf("resolver backend failure: %+v, %v", d, err)
	}
}

// cmdCalls is how many times each master of cc ran command (INFO
// commandstats), by address.
func cmdCalls(t *testing.T, cc *redis.ClusterClient, command string) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int64{}
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		s, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var n int64
		for _, line := range strings.Split(s, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				n, _ = strconv.ParseInt(calls, 10, 64)
			}
		}
		mu.Lock()
		out[c.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResetClusterOnlyTheTenantsMaster: a whole-tenant Reset on a Cluster
// scans only the master that holds the tenant's slot (all of a tenant's
// keys share it) and deletes every bucket of the tenant, none of another.
func TestResetClusterOnlyTheTenantsMaster(t *testing.T) {
	cluster := redistest.NewCluster(t, 3, 0)
	cc := cluster.Client(t)
	classes := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: class, Quota: quota.PerSecond(10)}}, nil
	})
	l := newLimiter(t, cc, classes)
	ctx := context.Background()
	for _, tenant := range []string{"t{1}", "other"} {
		for _, class := range []string{"a", "b", "c"} {
			if _, err := l.Allow(ctx, quota.Tenant{ID: tenant}, class, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	key, _ := l.Keys().Bucket("t{1}", "a")
	owner, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	before := cmdCalls(t, cc, "scan")
	if n, err := l.Reset(ctx, quota.Tenant{ID: "t{1}"}); err != nil || n != 3 {
		t.Fatalf("Reset = %d, %v; want 3 keys deleted", n, err)
	}
	after := cmdCalls(t, cc, "scan")
	for addr, n := range after {
		if addr == owner.Options().Addr {
			if n == before[addr] {
				t.Errorf("the tenant's master %s was not scanned", addr)
			}
		} else if n != before[addr] {
			t.Errorf("master %s, which holds none of the tenant's keys, was scanned %d times", addr, n-before[addr])
		}
	}
	for _, class := range []string{"a", "b", "c"} {
		k, _ := l.Keys().Bucket("t{1}", class)
		if n, _ := cc.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s survived the reset", k)
		}
		k, _ = l.Keys().Bucket("other", class)
		if n, _ := cc.Exists(ctx, k).Result(); n != 1 {
			t.Errorf("another tenant's %s was deleted", k)
		}
	}
}
