// Command httpbench measures, where users feel it, the same small Gin
// service (JWT bearer authentication, one route, one tier) in four
// configurations run as real processes against one private Redis:
//
//   - none: no limiter;
//   - tollgate: ginlimit.Middleware over a gate of core.New's defaults;
//   - ulule: github.com/ulule/limiter/v3's Gin middleware with its go-redis
//     store, a fixed window sized against the bucket (limit = capacity per
//     capacity / refill seconds);
//   - redis_rate: github.com/go-redis/redis_rate/v10 (GCRA) behind a
//     minimal hand-written Gin middleware;
//   - one-get: exactly one plain Redis GET per request through go-redis
//     with its defaults, and no decision: the least any shared check costs;
//   - tollgate-leases: tollgate with leases of at most 10 tokens for -lease-ttl
//     (1 s by default).
//
// With -delay, the services reach Redis through a link that delays each
// direction by that much (bench/internal/delaylink), and the summary
// reports the p50 and p99 each configuration adds to none, beside the
// link's measured round trip. With -svg, the run's pictures are drawn
// from its own figures: requests/s ratios as bars, the accuracy probes as
// admissions over time against the bucket's bound, and, with -delay, the
// latency added.
//
// Load comes from wrk (2 threads, --latency) over many tenants (a Lua
// script rotating pre-minted JWTs) and over one hot tenant, at several
// connection counts, interleaving the configurations round-robin in every
// repetition so that noise from other processes hits all of them alike.
// For each run it prints a benchstat line: requests/s, p50/p99 latency,
// the share of 429s (counted by the service) and Redis CPU per request
// (INFO cpu used_cpu_sys+used_cpu_user delta / requests).
//
// Accuracy: each limited configuration also runs as 4 replicas behind a
// round-robin balancer; one fresh tenant sends one request, idles until
// just before the end of ulule's window, then is driven hard across that
// boundary. Admitted requests are compared with the bucket's bound,
// capacity + refill x elapsed (tollgate; redis_rate is GCRA, the same
// bound), and with what the fixed window allows (2 x limit across a
// boundary).
//
//	cd bench && go run ./httpbench -count 5 -duration 2s   # what make bench/http runs
//
// The driver is also the service: it starts itself with -serve. Every
// child dies with the driver (Pdeathsig); load targets only 127.0.0.1.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

var (
	flagServe      = flag.Bool("serve", false, "run as the service (started by the driver)")
	flagConfig     = flag.String("config", "none", "with -serve: the limiter, one of "+strings.Join(configs, ", "))
	flagAddr       = flag.String("addr", "127.0.0.1:0", "with -serve: listen address")
	flagRedis      = flag.String("redis", "", "with -serve: Redis URL")
	flagCount      = flag.Int("count", 5, "repetitions of every measurement (the summary quotes medians)")
	flagDuration   = flag.Duration("duration", 2*time.Second, "length of one wrk run (whole seconds)")
	flagConns      = flag.String("conns", "16,64,256", "wrk connection counts")
	flagTenants    = flag.Int("tenants", 10000, "tenants of the many-tenant load (pre-minted tokens)")
	flagReplicas   = flag.Int("replicas", 4, "replicas behind the balancer in the accuracy phase")
	flagConfigs    = flag.String("configs", strings.Join(configs, ","), "configurations to run")
	flagOut        = flag.String("markdown", "", "also write the Markdown summary to this file")
	flagCPUProfile = flag.String("cpuprofile", "", "write the service's CPU profile to this file when it stops (driving: each service started to this file + \".<configuration>.<n>\")")
	flagDelay      = flag.Duration("delay", 0, "put Redis behind a link delaying each direction by this much (e.g. 250us) and report the latency each configuration adds to none")
	flagSVG        = flag.String("svg", "", "write the run's pictures (SVG) into this directory")
	flagLeaseTTL   = flag.Duration("lease-ttl", time.Second, "the lease TTL of tollgate-leases (its largest lease is 10 tokens)")
	flagLoadCPU    = flag.String("load-cpu", "", "pin wrk to these cores (taskset -c list, e.g. 0); empty: not pinned")
	flagServiceCPU = flag.String("service-cpu", "", "pin the services and their Redis to these cores (taskset -c list, e.g. 1); empty: not pinned")
)

func main() {
	flag.Parse()
	var err error
	if *flagLeaseTTL <= 0 {
		fmt.Fprintln(os.Stderr, "httpbench: -lease-ttl must be positive")
		os.Exit(2)
	}
	switch {
	case *flagServe:
		err = serve(*flagConfig, *flagAddr, *flagRedis)
	case *flagFlood > 0:
		err = floodDrive()
	default:
		err = drive()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}
