// Command loadbench measures tollgate side by side with the leading Go peer,
// go-redis/redis_rate v10, and with the Redis server's own ceiling, against
// ONE Redis in ONE run, so that ratios are fair on a noisy machine:
//
//   - throughput (ops/s), p50/p99 latency at the client, and Redis CPU per
//     decision (used_cpu_sys+user delta / decisions; INFO commandstats usec
//     per decision; script calls per decision), for tollgate without
//     batching, with batching, with its defaults, redis_rate Allow and a raw
//     go-redis EVALSHA of tollgate's script, at several concurrencies, on one
//     hot tenant and on many tenants;
//   - redis-benchmark -P 16 (and -P 1) running EVALSHA of the same script:
//     what the server can do with a client that costs almost nothing; and,
//     beside it with -P 16, a floor script that only reads the key, calls
//     TIME and writes a value back with SET PX (what any bucket on the
//     server's clock must do at least): Redis CPU per call of tollgate's
//     script against the floor's;
//   - bytes per bucket: used_memory delta over N buckets on a fresh server,
//     and MEMORY USAGE of sampled keys, for tollgate and redis_rate, with keys
//     of the same length.
//
// Each measurement is printed as a benchstat line as soon as it is taken; a
// Markdown summary of medians and ratios against redis_rate follows.
//
//	go run ./loadbench -count 5 | tee bench.txt   # then: benchstat bench.txt
//
// It starts its own redis-server (from PATH) on a free port unless -redis or
// REDIS_URL names one; memory and redis-benchmark always use servers of their
// own or the named one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/bench/internal/ints"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

var (
	flagRedis    = flag.String("redis", os.Getenv("REDIS_URL"), "Redis URL; empty: start a private redis-server")
	flagCount    = flag.Int("count", 3, "repetitions of every measurement (the summary quotes medians)")
	flagDuration = flag.Duration("duration", 2*time.Second, "length of one throughput measurement")
	flagConc     = flag.String("conc", "1,16,64,256", "concurrent callers")
	flagTenants  = flag.String("tenants", "1,10000", "tenants the callers spread over (1: one hot tenant)")
	flagImpls    = flag.String("impls", "tollgate,tollgate-batched,tollgate-deny,tollgate-lease10,tollgate-default,redis_rate,evalsha", "implementations to run")
	flagPool     = flag.Int("pool", 64, "go-redis pool size (every implementation)")
	flagBuckets  = flag.Int("buckets", 100000, "buckets for the memory measurement (0: skip)")
	flagProfile  = flag.String("cpuprofile", "", "write a CPU profile of the driver (client side) to this file")
	flagRB       = flag.Bool("redis-benchmark", true, "run redis-benchmark on the script as the server's ceiling")
)

// the quota every implementation enforces: capacity 1000, 100 tokens/s
const (
	capacity = 1000
	rate     = 100
)

func main() {
	flag.Parse()
	if *flagProfile != "" {
		f, err := os.Create(*flagProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// result is one measurement.
type result struct {
	name   string // benchstat name without "Benchmark"
	impl   string
	conc   int
	tenant int
	ops    float64 // per second
	p50    float64 // µs
	p99    float64 // µs
	cpu    float64 // Redis CPU µs per decision
	cmd    float64 // commandstats µs per decision
	calls  float64 // script calls per decision
}

var results []result

func run() error {
	ctx := context.Background()
	url := *flagRedis
	if url == "" {
		srv, err := redistest.StartServer()
		if err != nil {
			return fmt.Errorf("%w (set -redis or REDIS_URL to use another)", err)
		}
		defer srv.Close()
		url = srv.URL()
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.PoolSize = *flagPool
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", url, err)
	}
	version, _ := infoField(ctx, client, "server", "redis_version")
	fmt.Printf("goos: %s\ngoarch: %s\npkg: github.com/tollgate-go/tollgate/bench/loadbench\n", runtime.GOOS, runtime.GOARCH)
	fmt.Printf("redis: %s\ncpus: %d\n", version, runtime.NumCPU())
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("loadavg-start: %s", la)
	}
	sha, err := client.ScriptLoad(ctx, lua.TokenBucket()).Result()
	if err != nil {
		return err
	}
	floorSHA, err := client.ScriptLoad(ctx, floorScript).Result()
	if err != nil {
		return err
	}
	prefix := "lb" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	concs, err := ints.Parse(*flagConc)
	if err != nil {
		return err
	}
	tenantCounts, err := ints.Parse(*flagTenants)
	if err != nil {
		return err
	}
	impls := strings.Split(*flagImpls, ",")
	for rep := 0; rep < *flagCount; rep++ {
		for _, tenants := range tenantCounts {
			for _, conc := range concs {
				// interleaved: load from other processes hits every
				// implementation alike
				for _, impl := range impls {
					r, err := measure(ctx, client, impl, sha, prefix, conc, tenants)
					if err != nil {
						return fmt.Errorf("%s c=%d tenants=%d: %w", impl, conc, tenants, err)
					}
					emit(r)
				}
			}
			if *flagRB {
				// tollgate's script beside the floor, then unpipelined
				for _, rb := range rbRuns(sha, floorSHA) {
					r, err := redisBenchmark(ctx, client, opt.Addr, rb.sha, rb.impl, prefix, rb.p, tenants)
					if err != nil {
						return err
					}
					emit(r)
				}
			}
		}
	}
	var mem []memResult
	if *flagBuckets > 0 {
		for rep := 0; rep < *flagCount; rep++ {
			for _, impl := range []string{"tollgate", "redis_rate"} {
				m, err := memory(ctx, impl, *flagBuckets)
				if err != nil {
					return fmt.Errorf("memory %s: %w", impl, err)
				}
				fmt.Printf("BenchmarkMemory/impl=%s 1 %.1f bytes/bucket %.1f memory-usage-B/key\n", impl, m.delta, m.usage)
				mem = append(mem, m)
			}
		}
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("loadavg-end: %s", la)
	}
	summary(impls, concs, tenantCounts, mem)
	return nil
}

func emit(r result) {
	results = append(results, r)
	fmt.Printf("Benchmark%s 1 %.0f ops/s %.1f p50-us %.1f p99-us %.2f redis-cpu-us/op %.2f redis-cmd-us/op %.3f calls/op\n",
		r.name, r.ops, r.p50, r.p99, r.cpu, r.cmd, r.calls)
}
