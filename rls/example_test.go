package rls_test

import (
	"log"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc"
)

// A rate limit service for Envoy over the same Redis, tiers and limiter
// options as the services behind the gateway.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": {Capacity: 20, RefillPerSecond: 2}, "export": quota.PerMinute(10)}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	lim, err := core.New(rdb, res, core.WithFailurePolicy(core.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	srv, err := rls.New(lim, rls.WithMaxCost(100))
	if err != nil {
		log.Fatal(err) // a bad option, named
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	g.GracefulStop()
}
