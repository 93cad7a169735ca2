package core_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// BenchmarkCheck measures checks per second against a private Redis, many
// tenants (10k), at several concurrencies, for tollgate with one call per
// check, tollgate with batching (the default), and go-redis/redis_rate v10
// (the leading Go peer) in the same run, so ratios are fair on a noisy
// machine. The load driver (bench/loadbench, make bench) adds latency
// percentiles, Redis CPU per decision, a raw EVALSHA and redis-benchmark:
//
//	make bench/core   # or: go test -run '^$' -bench Check -count 5 ./core | benchstat -
func BenchmarkCheck(b *testing.B) {
	srv := redistest.NewServer(b)
	const tenants = 10000
	qt := quota.Quota{Capacity: 1000, RefillPerSecond: 100}
	type checker func(ctx context.Context, tenant int) error
	// allow checks with l; its stop closes l
	allow := func(l *core.Limiter) (checker, func()) {
		return func(ctx context.Context, i int) error {
			_, err := l.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1)
			return err
		}, func() { _ = l.Close() }
	}
	impls := []struct {
		name string
		mk   func(b *testing.B, c *redis.Client) (checker, func())
	}{
		{"tollgate", func(b *testing.B, c *redis.Client) (checker, func()) {
			return allow(benchLimiter(b, c, qt, core.WithBatching(false)))
		}},
		{"tollgate-batched", func(b *testing.B, c *redis.Client) (checker, func()) {
			return allow(benchLimiter(b, c, qt, core.WithBatching(true)))
		}},
		{"redis_rate", func(b *testing.B, c *redis.Client) (checker, func()) {
			rl := redis_rate.NewLimiter(c)
			lim := redis_rate.Limit{Rate: 100, Burst: 1000, Period: time.Second}
			prefix := redistest.Prefix(b)
			return func(ctx context.Context, i int) error {
				_, err := rl.Allow(ctx, prefix+strconv.Itoa(i), lim)
				return err
			}, func() {}
		}},
	}
	for _, conc := range []int{1, 16, 64, 256} {
		for _, impl := range impls {
			b.Run("c="+strconv.Itoa(conc)+"/"+impl.name, func(b *testing.B) {
				c := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64; o.ContextTimeoutEnabled = true })
				check, stop := impl.mk(b, c)
				defer stop()
				var n atomic.Int64
				ctx := context.Background()
				if conc == 1 {
					for b.Loop() {
						if err := check(ctx, int(n.Add(1)%tenants)); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(conc / 2) // 2 cores: GOMAXPROCS * conc/2 goroutines
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := check(ctx, int(n.Add(1)%tenants)); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
			})
		}
	}
}

func benchLimiter(b *testing.B, c *redis.Client, q quota.Quota, opts ...core.Option) *core.Limiter {
	// built once, as a real resolver's cache does: the benchmark measures
	// the limiter, not a resolver that allocates on every call
	buckets := []quota.Bucket{{Name: "default", Quota: q}}
	r := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return buckets, nil
	})
	opts = append([]core.Option{core.WithPrefix(redistest.Prefix(b)), core.WithTimeout(5 * time.Second)}, opts...)
	l, err := core.New(c, r, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkSingleCallerP50 measures what the library adds to one caller's
// latency: each iteration makes one Limiter.Allow and one raw go-redis
// EVALSHA of the same script with the same arguments (on another tenant),
// back to back, so that the machine's drift hits both alike, and reports
// each median and their ratio (the target is ≤ 1.1x). Run with -count and read
// the medians of p50-ratio.
func BenchmarkSingleCallerP50(b *testing.B) {
	srv := redistest.NewServer(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	q := quota.Quota{Capacity: 1000, RefillPerSecond: 100}
	for _, v := range []struct {
		name string
		opts []core.Option
	}{{"default", nil}, {"unbatched", []core.Option{core.WithBatching(false)}}} {
		b.Run(v.name, func(b *testing.B) {
			l := benchLimiter(b, c, q, v.opts...)
			defer l.Close()
			ctx := context.Background()
			sha := tokenBucketSHA(b, c)
			ttl := strconv.FormatInt(q.Capacity*1000/int64(q.RefillPerSecond)+1000, 10)
			var lib, raw []time.Duration
			n := 0
			for b.Loop() {
				n++
				t0 := time.Now()
				if _, err := l.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(n%10000)}, "default", 1); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				key := l.Keys().Prefix() + ":{u" + strconv.Itoa(n%10000) + "}:default"
				if err := c.EvalSha(ctx, sha, []string{key}, "", "1", "1000", "100", ttl).Err(); err != nil {
					b.Fatal(err)
				}
				lib, raw = append(lib, t1.Sub(t0)), append(raw, time.Since(t1))
			}
			pl, pr := median(lib), median(raw)
			b.ReportMetric(float64(pl.Microseconds()), "lib-p50-µs")
			b.ReportMetric(float64(pr.Microseconds()), "evalsha-p50-µs")
			b.ReportMetric(float64(pl)/float64(pr), "p50-ratio")
		})
	}
}

func tokenBucketSHA(b *testing.B, c *redis.Client) string {
	sha, err := c.ScriptLoad(context.Background(), lua.TokenBucket()).Result()
	if err != nil {
		b.Fatal(err)
	}
	return sha
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
