package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// BenchmarkCheckCallerDeadline is BenchmarkCheck's one caller, batched, with
// a caller whose deadline comes before the limiter's timeout (as a server's
// request context often does): the caller's deadline alone bounds the store
// call, so the check allocates no timeout context of its own.
func BenchmarkCheckCallerDeadline(b *testing.B) {
	srv := redistest.NewServer(b)
	c := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64; o.ContextTimeoutEnabled = true })
	l := benchLimiter(b, c, quota.Quota{Capacity: 1000, RefillPerSecond: 100}, core.WithBatching(true), core.WithTimeout(time.Hour))
	defer func() { _ = l.Close() }()
	// one context for the whole run, so that making it is not measured
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	i := 0
	for b.Loop() {
		i = (i + 1) % 10000
		if _, err := l.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1); err != nil {
			b.Fatal(err)
		}
	}
}
