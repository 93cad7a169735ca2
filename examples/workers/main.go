// Command workers shows a fleet waiting its turn on one upstream quota.
//
// N worker processes call one upstream (a stand-in for a provider that
// allows so many requests and so many tokens a minute to the whole
// organisation, and answers 429 above either). Each call uses tokens the
// upstream reports only in its answer. The run is made twice, each against
// a fresh upstream:
//
//   - naive: every worker calls as fast as its goroutines go and retries
//     each 429 after a short back-off;
//   - waiting: every worker first waits on two shared buckets in Redis (one
//     request, then the job's estimate of tokens, with core.Limiter.Wait),
//     then calls, then settles the tokens reservation with the tokens the
//     upstream reported (core.Limiter.Settle).
//
// It prints both side by side and exits 0 only if the waiting workers
// stayed within both of the upstream's quotas without one 429. It needs a
// Redis at REDIS_URL (default redis://127.0.0.1:6379/0).
//
//	cd examples && go run ./workers -workers 4
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

func main() {
	if isWorker() {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("workers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := Options{RedisURL: getenv("REDIS_URL"), Prefix: "workers-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if o.RedisURL == "" {
		o.RedisURL = "redis://127.0.0.1:6379/0"
	}
	fs.IntVar(&o.Workers, "workers", 4, "worker processes")
	fs.IntVar(&o.Goroutines, "goroutines", 8, "concurrent jobs per worker")
	fs.DurationVar(&o.Duration, "duration", 6*time.Second, "how long each mode sends jobs")
	rpm := fs.Int64("rpm", 600, "the upstream's requests per minute (its burst: 2 s of them)")
	tpm := fs.Int64("tpm", 90000, "the upstream's tokens per minute (its burst: 2 s of them)")
	fs.Int64Var(&o.Estimate, "estimate", 300, "the most tokens a job uses; the upstream reports a third of it to all of it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Requests = quota.Quota{Capacity: max(1, *rpm/30), RefillPerSecond: float64(*rpm) / 60}
	o.Tokens = quota.Quota{Capacity: max(1, *tpm/30), RefillPerSecond: float64(*tpm) / 60}
	fmt.Fprintf(stdout, "upstream quota: requests %s, tokens %s; %d workers x %d goroutines, %v per mode\n\n",
		formatQuota(o.Requests), formatQuota(o.Tokens), o.Workers, o.Goroutines, o.Duration)
	rs, err := Run(ctx, o)
	if err != nil {
		return err
	}
	printTable(stdout, rs)
	for _, r := range rs {
		if r.Mode == ModeWaiting && !r.Held() {
			return errors.New("the waiting workers did not stay within the upstream's quotas")
		}
	}
	return nil
}
