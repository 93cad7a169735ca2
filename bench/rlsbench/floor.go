package main

import (
	"context"
	"fmt"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

// floorName is the third service of the run: the least a rate limit
// service on grpc-go and go-redis can cost per call. It answers every
// ShouldRateLimit OK after exactly one Redis command (INCR of the first
// descriptor's first value), through go-redis with its defaults: no
// configuration, no rules, no script, no headers. Neither tollgate-rls nor
// the reference can cost less per call than it, so its service plus Redis
// CPU per request bounds any ratio between them from below.
const floorName = "floor (one INCR)"

// floorServer is the floor's ShouldRateLimit.
type floorServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	rdb *redis.Client
}

func (f floorServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	key := "floor"
	if ds := req.GetDescriptors(); len(ds) > 0 && len(ds[0].GetEntries()) > 0 {
		key += ":" + ds[0].GetEntries()[0].GetValue()
	}
	if err := f.rdb.Incr(ctx, key).Err(); err != nil {
		return nil, err
	}
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		res.Statuses = append(res.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return res, nil
}

// serveFloor runs the floor on addr against the Redis at redisAddr until
// the process is killed (rlsbench -floor-serve, started by run).
func serveFloor(addr, redisAddr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer func() { _ = rdb.Close() }()
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, floorServer{rdb: rdb})
	if err := s.Serve(ln); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	return nil
}
