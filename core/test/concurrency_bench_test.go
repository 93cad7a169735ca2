package core_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// BenchmarkConcurrencyCheck compares a check of a class with a concurrency
// limit (the second script, then the slot's release, ZREM, in the
// background) with a plain check of the same quota, in one run against one
// private Redis, 10,000 tenants, 64 callers, batching on (the default).
// Besides checks/s it reports Redis CPU per decision (INFO cpu
// used_cpu_sys + used_cpu_user delta / checks, the releases included: the
// limiter is closed, every release done, before the second reading).
//
//	go test -run '^$' -bench ConcurrencyCheck -count 5 ./core/test | benchstat -
func BenchmarkConcurrencyCheck(b *testing.B) {
	srv := redistest.NewServer(b)
	const tenants = 10000
	for _, impl := range []struct {
		name  string
		quota quota.Quota
	}{
		{"plain", quota.Quota{Capacity: 1 << 30, RefillPerSecond: 1 << 30}},
		{"concurrency", quota.Quota{Capacity: 1 << 30, RefillPerSecond: 1 << 30, Concurrency: 1000}},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			c := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64; o.ContextTimeoutEnabled = true })
			l := benchLimiter(b, c, impl.quota)
			ctx := context.Background()
			var n atomic.Int64
			before := redisCPU(b, c)
			b.SetParallelism(32) // 2 cores: 64 callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := l.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(int(n.Add(1)%tenants))}, "default", 1)
					if err != nil || !d.Allowed {
						b.Errorf("%v, %v", d.Reason, err)
						return
					}
					d.Slot.Release()
				}
			})
			elapsed := b.Elapsed()
			_ = l.Close() // every release sent
			cpu := redisCPU(b, c) - before
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
			b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "redis-cpu-µs/check")
		})
	}
}

// redisCPU is the server's used_cpu_sys + used_cpu_user.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
