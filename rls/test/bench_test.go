package test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// Callers is the number of concurrent callers of BenchmarkGatewayHop.
const callers = 64

// BenchmarkGatewayHop measures what the gRPC hop costs: ShouldRateLimit
// over TCP loopback ("rls") beside the same check made in process ("core"),
// on one limiter and one Redis in one run, at 64 concurrent callers, each
// its own tenant, every check admitted. The ratio of the two ns/op is the
// hop's cost (docs/benchmarks.md).
func BenchmarkGatewayHop(b *testing.B) {
	c := redistest.Client(b)
	res, err := quota.NewResolver(quota.Tiers{Default: "big", Tiers: map[string]quota.Tier{
		"big": {Classes: map[string]quota.Quota{"default": {Capacity: 1 << 40, RefillPerSecond: 1e9}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	// a generous timeout: on a loaded machine a failed-open answer (no store
	// call) would flatter whichever row met it
	lim, err := core.New(c, res, core.WithPrefix(redistest.Prefix(b)), core.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lim.Close() })
	client := serve(b, lim)
	parallel := func(b *testing.B, check func(ctx context.Context, tenant string) bool) {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			tenant := "bench-" + strconv.FormatInt(next.Add(1), 10)
			ctx := context.Background()
			for pb.Next() {
				if !check(ctx, tenant) {
					b.Error("not admitted by the store")
					return
				}
			}
		})
	}
	b.Run("core", func(b *testing.B) {
		parallel(b, func(ctx context.Context, tenant string) bool {
			d, err := lim.Allow(ctx, quota.Tenant{ID: tenant}, "default", 1)
			return err == nil && d.Reason == core.ReasonOK
		})
	})
	b.Run("rls", func(b *testing.B) {
		parallel(b, func(ctx context.Context, tenant string) bool {
			res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}},
			}})
			// a store answer carries the bucket; a failed-open one does not
			return err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK && res.GetStatuses()[0].GetCurrentLimit() != nil
		})
	})
}
