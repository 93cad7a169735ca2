package test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// testTiers: free has class default (3 burst, 1/s) and export (10, 0.5/s);
// pro adds a tenant-wide ceiling of 6 (0.5/s).
func testTiers() quota.Tiers {
	return quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 3, RefillPerSecond: 1},
			"export":  {Capacity: 10, RefillPerSecond: 0.5},
		}},
		"pro": {Classes: map[string]quota.Quota{
			"default": {Capacity: 5, RefillPerSecond: 1},
			"export":  {Capacity: 10, RefillPerSecond: 1},
		}, Ceiling: &quota.Quota{Capacity: 6, RefillPerSecond: 0.5}},
	}}
}

// newLimiter is a limiter on testTiers over c (see testkit.NewLimiter),
// closed when t ends.
func newLimiter(t testing.TB, c redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	l := testkit.NewLimiter(t, c, testTiers(), opts...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// serve runs an RLS over lim on a TCP loopback port and returns a client
// of it, as Envoy would connect.
func serve(t testing.TB, lim *core.Limiter, opts ...rls.Option) rlsv3.RateLimitServiceClient {
	t.Helper()
	srv, err := rls.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		g.Stop()
		<-done
	})
	return rlsv3.NewRateLimitServiceClient(cc)
}

func ask(t testing.TB, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return res
}
