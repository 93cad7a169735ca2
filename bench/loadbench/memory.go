package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

type memResult struct {
	impl         string
	delta, usage float64
}

// memory writes n buckets through impl on a fresh server and reports the
// used_memory delta per bucket and the mean MEMORY USAGE of 1000 keys. Keys
// have the same length for both implementations.
func memory(ctx context.Context, impl string, n int) (memResult, error) {
	srv, err := redistest.StartServer()
	if err != nil {
		return memResult{}, err
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: *flagPool})
	closeWriters := func() { _ = client.Close() }
	// a fill time of an hour, and each bucket half drained: nothing expires
	// while memory is measured (redis_rate's TTL is the time to full)
	q := quota.Quota{Capacity: 36000, RefillPerSecond: 10}
	const half = 18000
	var charge func(i int) error
	var key func(i int) string
	switch impl {
	case "tollgate":
		// "rl:{t0000001}:default"
		l, err := core.New(client, quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
			return []quota.Bucket{{Name: "default", Quota: q}}, nil
		}), core.WithPrefix("rl"), core.WithBatching(true), core.WithTimeout(5*time.Second))
		if err != nil {
			return memResult{}, err
		}
		closeWriters = func() { _ = l.Close(); _ = client.Close() }
		charge = func(i int) error {
			_, err := l.Allow(ctx, quota.Tenant{ID: fmt.Sprintf("t%07d", i)}, "default", half)
			return err
		}
		key = func(i int) string { return fmt.Sprintf("rl:{t%07d}:default", i) }
	case "redis_rate":
		// "rate:" + "{000001}:default": the same length as tollgate's key
		rl := redis_rate.NewLimiter(client)
		lim := redis_rate.Limit{Rate: 10, Burst: 36000, Period: time.Second}
		charge = func(i int) error {
			_, err := rl.AllowN(ctx, fmt.Sprintf("{%06d}:default", i), lim, half)
			return err
		}
		key = func(i int) string { return fmt.Sprintf("rate:{%06d}:default", i) }
	default:
		return memResult{}, fmt.Errorf("unknown implementation %q", impl)
	}
	defer func() { closeWriters() }()
	if err := charge(n); err != nil { // scripts loaded
		return memResult{}, err
	}
	// measured over a connection of its own, with the writers' connections
	// closed, so that client buffers are not counted as bucket bytes
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
	defer probe.Close()
	before, err := usedMemory(ctx, probe)
	if err != nil {
		return memResult{}, err
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := charge(int(i)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return memResult{}, err
	}
	closeWriters()
	after, err := usedMemory(ctx, probe)
	if err != nil {
		return memResult{}, err
	}
	var sum float64
	const samples = 1000
	for i := range samples {
		u, err := probe.MemoryUsage(ctx, key(i*(n/samples)), 0).Result()
		if err != nil {
			return memResult{}, fmt.Errorf("MEMORY USAGE %s: %w", key(i*(n/samples)), err)
		}
		sum += float64(u)
	}
	return memResult{impl: impl, delta: float64(after-before) / float64(n), usage: sum / samples}, nil
}
