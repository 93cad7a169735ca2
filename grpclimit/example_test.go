package grpclimit_test

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// auth stands for your authentication interceptor: after verifying the
// caller's token it stores the tenant in the context.
func auth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(gate.ContextWithTenant(ctx, quota.Tenant{ID: "acme", Tier: "pro"}), req)
}

// A server whose exports cost 10 tokens of their own class, with the
// health check exempt, and which answers Unavailable instead of
// ResourceExhausted.
func ExampleUnaryServerInterceptor() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	res, err := quota.NewResolver(quota.Tiers{Default: "pro", Tiers: map[string]quota.Tier{
		"pro": {Classes: map[string]quota.Quota{"default": quota.PerSecond(50), "export": quota.PerMinute(60)}},
	}})
	if err != nil {
		panic(err)
	}
	lim, err := core.New(rdb, res, core.WithFailurePolicy(core.FailClosed))
	if err != nil {
		panic(err)
	}
	// the gate is built, and its configuration checked, once
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		"/reports.v1.Reports/Export":   {Class: "export", Cost: 10},
		"/grpc.health.v1.Health/Check": {Exempt: true},
	}))
	if err != nil {
		panic(err) // a bad route table, named
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth, grpclimit.UnaryServerInterceptor(g, grpclimit.WithDeniedCode(codes.Unavailable))),
		// after your stream auth interceptor
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(g, grpclimit.WithDeniedCode(codes.Unavailable))),
	)
	_ = srv // register services, then srv.Serve(listener)
}

// A client that waits out throttling as the server asks, with jitter, at
// most four attempts and ten seconds per wait.
func ExampleUnaryClientInterceptor() {
	conn, err := grpc.NewClient("dns:///api.example.com:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(retry.WithMaxAttempts(4), retry.WithMaxDelay(10*time.Second))),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(retry.WithMaxAttempts(4))),
	)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
}
