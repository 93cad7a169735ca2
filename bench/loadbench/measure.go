package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// checker makes one decision for tenant i.
type checker func(ctx context.Context, i int) error

func setup(client *redis.Client, impl, sha, prefix string, tenants int) (checker, func(), error) {
	ids := make([]quota.Tenant, tenants)
	keys := make([]string, tenants)
	rrKeys := make([]string, tenants)
	for i := range ids {
		ids[i] = quota.Tenant{ID: "t" + strconv.Itoa(i)}
		keys[i] = prefix + ":{t" + strconv.Itoa(i) + "}:default"
		rrKeys[i] = prefix + "rr:{t" + strconv.Itoa(i) + "}:default"
	}
	q := quota.Quota{Capacity: capacity, RefillPerSecond: rate}
	resolver := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: "default", Quota: q}}, nil
	})
	limiter := func(opts ...core.Option) (checker, func(), error) {
		opts = append([]core.Option{core.WithPrefix(prefix), core.WithTimeout(5 * time.Second)}, opts...)
		l, err := core.New(client, resolver, opts...)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, i int) error {
			_, err := l.Allow(ctx, ids[i], "default", 1)
			return err
		}, func() { _ = l.Close() }, nil
	}
	switch impl {
	case "tollgate":
		return limiter(core.WithBatching(false), core.WithDenyCache(false))
	case "tollgate-batched":
		return limiter(core.WithBatching(true), core.WithDenyCache(false))
	case "tollgate-default":
		return limiter()
	case "tollgate-deny":
		// opt-in: the deny cache, with batching
		return limiter(core.WithBatching(true), core.WithDenyCache(true))
	case "tollgate-lease10":
		// opt-in: a lease of 10 tokens per replica and tenant, for 1 s
		return limiter(core.WithBatching(true), core.WithLeases("default", 10, time.Second))
	case "redis_rate":
		rl := redis_rate.NewLimiter(client)
		lim := redis_rate.Limit{Rate: rate, Burst: capacity, Period: time.Second}
		return func(ctx context.Context, i int) error {
			_, err := rl.Allow(ctx, rrKeys[i], lim)
			return err
		}, func() {}, nil
	case "evalsha":
		ttl := strconv.Itoa(capacity*1000/rate + 1000)
		return func(ctx context.Context, i int) error {
			return client.EvalSha(ctx, sha, []string{keys[i]}, "", "1", strconv.Itoa(capacity), strconv.Itoa(rate), ttl).Err()
		}, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown implementation %q", impl)
}

func measure(ctx context.Context, client *redis.Client, impl, sha, prefix string, conc, tenants int) (result, error) {
	check, stop, err := setup(client, impl, sha, prefix, tenants)
	if err != nil {
		return result{}, err
	}
	defer stop()
	// warm up: connections, script cache, buckets
	for i := range min(tenants, 100) {
		if err := check(ctx, i); err != nil {
			return result{}, err
		}
	}
	var all []time.Duration
	var elapsed time.Duration
	cost, err := redisSpent(ctx, client, func() (err error) {
		all, elapsed, err = drive(ctx, check, conc, tenants)
		return err
	})
	if err != nil {
		return result{}, err
	}
	n := float64(len(all))
	if n == 0 {
		return result{}, errors.New("no calls completed")
	}
	tname := "10k"
	if tenants == 1 {
		tname = "hot"
	} else if tenants != 10000 {
		tname = strconv.Itoa(tenants)
	}
	return result{
		name: fmt.Sprintf("Load/tenants=%s/c=%d/impl=%s", tname, conc, impl),
		impl: impl, conc: conc, tenant: tenants,
		ops: n / elapsed.Seconds(),
		p50: us(all[len(all)/2]), p99: us(all[min(len(all)-1, len(all)*99/100)]),
		cpu: cost.cpu * 1e6 / n, cmd: cost.usec / n, calls: cost.calls / n,
	}, nil
}

// drive runs check from conc callers, round robin over the tenants, for
// -duration, and returns every call's latency, sorted, and the time it took.
func drive(ctx context.Context, check checker, conc, tenants int) ([]time.Duration, time.Duration, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(*flagDuration)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if err := check(ctx, int(next.Add(1)%int64(tenants))); err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				ls = append(ls, time.Since(t0))
			}
			lat[w] = ls
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, 0, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all, elapsed, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
