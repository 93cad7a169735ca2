// Command replicas is tollgate's demo: why a shared limiter exists.
//
// It starts N replicas of one HTTP service behind a round-robin load
// balancer, all in this process, and drives one tenant's traffic through
// them twice: first with an in-process limiter in each replica
// (golang.org/x/time/rate), then with tollgate's shared bucket in Redis,
// through the httplimit middleware behind JWT authentication as in the other
// examples. The in-process limiters admit about N times the configured
// limit; the shared bucket admits the limit, whatever N is.
//
// A second table shows concurrency limits the same way: the tenant's
// callers keep many requests open at once, handlers take -hold each, and
// the handlers count how many of them run at once across the fleet. With a
// semaphore of -concurrency per replica the peak is up to N times that;
// with tollgate's fleet-wide slots it is at most -concurrency.
//
// It uses the Redis at REDIS_URL when set, else an embedded in-process
// Redis-compatible server (miniredis), and says which. It exits 0 only if
// the shared limiter held the token-bucket bound, admitted <= capacity +
// rate x elapsed, and tollgate's slots held the concurrency limit.
//
//	make demo
//	cd examples && go run ./replicas -replicas 8
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, isTerminal(os.Stdout))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

// isTerminal reports whether f is a character device (a terminal), where
// the progress line may be rewritten in place.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, live bool) error {
	fs := flag.NewFlagSet("replicas", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := Options{Live: live, Progress: stdout}
	fs.IntVar(&o.Replicas, "replicas", 4, "number of service replicas behind the load balancer")
	fs.Int64Var(&o.Quota.Capacity, "capacity", 20, "bucket capacity (burst), tokens")
	fs.Float64Var(&o.Quota.RefillPerSecond, "rate", 5, "refill rate, tokens per second")
	fs.DurationVar(&o.Duration, "duration", 4*time.Second, "how long to drive traffic in each mode")
	fs.IntVar(&o.RPS, "rps", 200, "requests per second the tenant sends")
	co := ConcurrencyOptions{}
	fs.Int64Var(&co.Limit, "concurrency", 2, "second table: requests of the tenant allowed in flight at once")
	fs.IntVar(&co.Callers, "callers", 32, "second table: concurrent callers of the tenant")
	fs.DurationVar(&co.Hold, "hold", 50*time.Millisecond, "second table: how long a handler takes")
	fs.DurationVar(&co.Duration, "concurrency-duration", time.Second, "second table: how long to drive traffic in each mode")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := o.Validate(); err != nil {
		return err
	}
	co.Replicas = o.Replicas
	if err := co.Validate(); err != nil {
		return err
	}

	client, where, closeStore, err := connect(ctx, getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	defer closeStore()
	o.Prefix = fmt.Sprintf("demo-%d", time.Now().UnixNano())

	fmt.Fprintf(stdout, "tollgate demo: %d replicas behind a round-robin balancer; one tenant limited to %d burst + %g/s, sending %d req/s for %v per mode\n",
		o.Replicas, o.Quota.Capacity, o.Quota.RefillPerSecond, o.RPS, o.Duration)
	fmt.Fprintf(stdout, "store: %s\n\n", where)

	results, err := Run(ctx, client, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	WriteTable(stdout, o.Quota, results)
	fmt.Fprintln(stdout)
	for _, r := range results {
		if r.Mode == ModeShared && !r.Held() {
			return fmt.Errorf("%w: admitted %d, bound %.1f", errBoundBroken, r.Admitted, r.Bound)
		}
	}
	fmt.Fprintf(stdout, "%d in-process limiters admit about %dx the limit; the shared bucket holds it for any number of replicas.\n",
		o.Replicas, o.Replicas)

	co.Prefix = o.Prefix + "-concurrency"
	fmt.Fprintf(stdout, "\nconcurrency: the same %d replicas; the tenant allowed %d in flight, %d callers, handlers that take %v, %v per mode\n\n",
		co.Replicas, co.Limit, co.Callers, co.Hold, co.Duration)
	cr, err := RunConcurrency(ctx, client, co)
	if err != nil {
		return err
	}
	WriteConcurrencyTable(stdout, cr)
	fmt.Fprintln(stdout)
	for _, r := range cr {
		if r.Mode == ModeShared && !r.Held() {
			return fmt.Errorf("%w: admitted %d, peak %d, limit %d", errLimitBroken, r.Admitted, r.Peak, r.Limit)
		}
	}
	fmt.Fprintf(stdout, "%d in-process semaphores of %d let up to %d run at once; tollgate's slots hold %d across the fleet.\n",
		co.Replicas, co.Limit, int64(co.Replicas)*co.Limit, co.Limit)
	return nil
}

// connect returns the Redis at url, or an embedded miniredis when url is
// empty, and says which.
func connect(ctx context.Context, url string) (redis.UniversalClient, string, func(), error) {
	if url != "" {
		c, err := config.NewRedisClient(url) // one server, a Cluster or a Sentinel's master
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		where := config.RedactURL(url)
		if sc, ok := c.(*redis.Client); ok && sc.Options().Addr != "FailoverClient" {
			where = sc.Options().Addr
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := c.Ping(pctx).Err(); err != nil {
			_ = c.Close()
			return nil, "", nil, fmt.Errorf("REDIS_URL: cannot reach Redis at %s: %w", where, err)
		}
		return c, "Redis at " + where + " (REDIS_URL)", func() { _ = c.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("embedded server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, "embedded in-process Redis-compatible server (miniredis); set REDIS_URL to use a real Redis", func() { _ = c.Close(); m.Close() }, nil
}
