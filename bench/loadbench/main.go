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
//     what the server can do with a client that costs almost nothing;
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
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
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
		srv, err := startServer()
		if err != nil {
			return err
		}
		defer srv.stop()
		url = srv.url()
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
	sha, err := client.ScriptLoad(ctx, core.ScriptSource()).Result()
	if err != nil {
		return err
	}
	prefix := "lb" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	concs, err := ints(*flagConc)
	if err != nil {
		return err
	}
	tenantCounts, err := ints(*flagTenants)
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
				for _, p := range []int{16, 1} {
					r, err := redisBenchmark(ctx, client, opt.Addr, sha, prefix, p, tenants)
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

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func emit(r result) {
	results = append(results, r)
	fmt.Printf("Benchmark%s 1 %.0f ops/s %.1f p50-us %.1f p99-us %.2f redis-cpu-us/op %.2f redis-cmd-us/op %.3f calls/op\n",
		r.name, r.ops, r.p50, r.p99, r.cpu, r.cmd, r.calls)
}

// checker makes one decision for tenant i.
type checker func(ctx context.Context, i int) error

func setup(client *redis.Client, impl, sha, prefix string, tenants int) (checker, func(), error) {
	ids := make([]core.Tenant, tenants)
	keys := make([]string, tenants)
	rrKeys := make([]string, tenants)
	for i := range ids {
		ids[i] = core.Tenant{ID: "t" + strconv.Itoa(i)}
		keys[i] = prefix + ":{t" + strconv.Itoa(i) + "}:default"
		rrKeys[i] = prefix + "rr:{t" + strconv.Itoa(i) + "}:default"
	}
	quota := core.Quota{Capacity: capacity, RefillPerSecond: rate}
	resolver := core.ResolverFunc(func(context.Context, core.Tenant, string) ([]core.Bucket, error) {
		return []core.Bucket{{Name: "default", Quota: quota}}, nil
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
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, err
	}
	cpu0, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
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
		return result{}, err
	}
	cpu1, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
	usec, calls, err := commandStats(ctx, client)
	if err != nil {
		return result{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
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
		cpu: (cpu1 - cpu0) * 1e6 / n, cmd: usec / n, calls: calls / n,
	}, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// serverCPU is used_cpu_sys + used_cpu_user, in seconds.
func serverCPU(ctx context.Context, c *redis.Client) (float64, error) {
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, ok := field(s, f)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		total += x
	}
	return total, nil
}

// commandStats returns the microseconds spent in script commands (and the
// commands they call, which Redis counts inside the script's time) and the
// number of script calls since CONFIG RESETSTAT.
func commandStats(ctx context.Context, c *redis.Client) (usec, calls float64, err error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		if cmd != "evalsha" && cmd != "eval" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	return usec, calls, nil
}

func infoField(ctx context.Context, c *redis.Client, section, name string) (string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	v, ok := field(s, name)
	if !ok {
		return "", fmt.Errorf("INFO %s has no %s", section, name)
	}
	return v, nil
}

func field(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// redisBenchmark runs redis-benchmark with pipeline depth p on the script:
// the server's ceiling, with a client that costs almost nothing.
func redisBenchmark(ctx context.Context, client *redis.Client, addr, sha, prefix string, p, tenants int) (result, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return result{}, err
	}
	key := prefix + "rb:{hot}:default"
	args := []string{"-h", host, "-p", port, "-c", "50", "-P", strconv.Itoa(p), "--csv"}
	if tenants > 1 {
		key = prefix + "rb:{__rand_int__}:default"
		args = append(args, "-r", strconv.Itoa(tenants))
	}
	// about the same length as a throughput measurement
	n := int(max(20000, 120000*p/16*int(flagDuration.Seconds())))
	if p == 1 {
		n = int(60000 * flagDuration.Seconds())
	}
	args = append(args, "-n", strconv.Itoa(n), "EVALSHA", sha, "1", key, "", "1", strconv.Itoa(capacity), strconv.Itoa(rate), strconv.Itoa(capacity*1000/rate+1000))
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, err
	}
	cpu0, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	cpu1, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
	usec, calls, err := commandStats(ctx, client)
	if err != nil {
		return result{}, err
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	var rec []string
	r := csv.NewReader(bufio.NewReader(strings.NewReader(string(out))))
	r.FieldsPerRecord = -1
	for {
		x, err := r.Read()
		if err != nil {
			break
		}
		if len(x) >= 7 && x[0] != "test" {
			rec = x
		}
	}
	if rec == nil {
		return result{}, fmt.Errorf("redis-benchmark: no result in %q", out)
	}
	num := func(s string) float64 { x, _ := strconv.ParseFloat(s, 64); return x }
	tname := "10k"
	if tenants == 1 {
		tname = "hot"
	}
	impl := "redis-benchmark-P" + strconv.Itoa(p)
	if calls == 0 {
		calls = 1
	}
	return result{
		name: fmt.Sprintf("Load/tenants=%s/c=50/impl=%s", tname, impl), impl: impl, conc: 50, tenant: tenants,
		ops: num(rec[1]), p50: num(rec[4]) * 1000, p99: num(rec[6]) * 1000,
		cpu: (cpu1 - cpu0) * 1e6 / calls, cmd: usec / calls, calls: 1,
	}, nil
}

type memResult struct {
	impl         string
	delta, usage float64
}

// memory writes n buckets through impl on a fresh server and reports the
// used_memory delta per bucket and the mean MEMORY USAGE of 1000 keys. Keys
// have the same length for both implementations.
func memory(ctx context.Context, impl string, n int) (memResult, error) {
	srv, err := startServer()
	if err != nil {
		return memResult{}, err
	}
	defer srv.stop()
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), PoolSize: *flagPool})
	closeWriters := func() { _ = client.Close() }
	// a fill time of an hour, and each bucket half drained: nothing expires
	// while memory is measured (redis_rate's TTL is the time to full)
	quota := core.Quota{Capacity: 36000, RefillPerSecond: 10}
	const half = 18000
	var charge func(i int) error
	var key func(i int) string
	switch impl {
	case "tollgate":
		// "rl:{t0000001}:default"
		l, err := core.New(client, core.ResolverFunc(func(context.Context, core.Tenant, string) ([]core.Bucket, error) {
			return []core.Bucket{{Name: "default", Quota: quota}}, nil
		}), core.WithPrefix("rl"), core.WithBatching(true), core.WithTimeout(5*time.Second))
		if err != nil {
			return memResult{}, err
		}
		closeWriters = func() { _ = l.Close(); _ = client.Close() }
		charge = func(i int) error {
			_, err := l.Allow(ctx, core.Tenant{ID: fmt.Sprintf("t%07d", i)}, "default", half)
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
	probe := redis.NewClient(&redis.Options{Addr: srv.addr(), PoolSize: 1})
	defer probe.Close()
	before, err := usedMemory(ctx, probe)
	if err != nil {
		return memResult{}, err
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := charge(int(i)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
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

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	v, err := infoField(ctx, c, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

type server struct {
	cmd  *exec.Cmd
	port int
	dir  string
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }
func (s *server) url() string  { return "redis://" + s.addr() + "/0" }

func startServer() (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "loadbench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", dir+"/redis.log")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server (set -redis or REDIS_URL to use another): %w", err)
	}
	s := &server{cmd: cmd, port: port, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("redis-server not ready within 10s")
		}
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summary prints a Markdown table of medians, with ratios against
// redis_rate measured in the same run.
func summary(impls []string, concs, tenantCounts []int, mem []memResult) {
	med := func(impl string, conc, tenants int, f func(result) float64) float64 {
		var xs []float64
		for _, r := range results {
			if r.impl == impl && r.tenant == tenants && (r.conc == conc || conc == 0) {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	ops := func(r result) float64 { return r.ops }
	cpu := func(r result) float64 { return r.cpu }
	fmt.Printf("\n## Summary (medians of %d runs; ratios against redis_rate in the same run)\n", *flagCount)
	for _, tenants := range tenantCounts {
		tname := strconv.Itoa(tenants) + " tenants"
		if tenants == 1 {
			tname = "one hot tenant"
		}
		fmt.Printf("\n### %s\n\n", tname)
		fmt.Println("| callers | implementation | ops/s | x redis_rate | p50 µs | p99 µs | Redis CPU µs/decision | x redis_rate | cmd µs/decision | script calls/decision |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range concs {
			base, baseCPU := med("redis_rate", c, tenants, ops), med("redis_rate", c, tenants, cpu)
			for _, impl := range impls {
				o, u := med(impl, c, tenants, ops), med(impl, c, tenants, cpu)
				fmt.Printf("| %d | %s | %.0f | %.2f | %.0f | %.0f | %.2f | %.2f | %.2f | %.3f |\n", c, impl, o, o/base,
					med(impl, c, tenants, func(r result) float64 { return r.p50 }),
					med(impl, c, tenants, func(r result) float64 { return r.p99 }),
					u, u/baseCPU, med(impl, c, tenants, func(r result) float64 { return r.cmd }),
					med(impl, c, tenants, func(r result) float64 { return r.calls }))
			}
		}
		if *flagRB {
			for _, p := range []int{16, 1} {
				impl := "redis-benchmark-P" + strconv.Itoa(p)
				fmt.Printf("| 50 | %s | %.0f | | %.0f | %.0f | %.2f | | %.2f | 1 |\n", impl, med(impl, 0, tenants, ops),
					med(impl, 0, tenants, func(r result) float64 { return r.p50 }), med(impl, 0, tenants, func(r result) float64 { return r.p99 }),
					med(impl, 0, tenants, cpu), med(impl, 0, tenants, func(r result) float64 { return r.cmd }))
			}
		}
	}
	// the targets, at 10k tenants when measured
	t := tenantCounts[len(tenantCounts)-1]
	best := ""
	for _, impl := range impls {
		// leases and the deny cache change what is measured (fewer store
		// calls): the targets are for one store call per decision
		if (impl == "tollgate-batched" || impl == "tollgate-default") && (best == "" || med(impl, 256, t, ops) > med(best, 256, t, ops)) {
			best = impl
		}
	}
	if best != "" && slices.Contains(concs, 256) && slices.Contains(concs, 1) {
		fmt.Printf("\n### Targets (%d tenants, %s at 256 callers)\n\n", t, best)
		fmt.Printf("- throughput at 256 callers: %.2fx redis_rate (target >= 2.0)\n", med(best, 256, t, ops)/med("redis_rate", 256, t, ops))
		if *flagRB {
			fmt.Printf("- throughput at 256 callers: %.2fx redis-benchmark -P 16 (target >= 1.0)\n", med(best, 256, t, ops)/med("redis-benchmark-P16", 0, t, ops))
		}
		fmt.Printf("- Redis CPU per decision at 256 callers: %.2fx redis_rate (target <= 0.6)\n", med(best, 256, t, cpu)/med("redis_rate", 256, t, cpu))
		for _, impl := range []string{"tollgate", "tollgate-batched", "tollgate-default"} {
			if slices.Contains(impls, impl) {
				fmt.Printf("- single-caller p50, %s: %.2fx raw EVALSHA (target <= 1.1)\n", impl,
					med(impl, 1, t, func(r result) float64 { return r.p50 })/med("evalsha", 1, t, func(r result) float64 { return r.p50 }))
			}
		}
	}
	if len(mem) > 0 {
		mm := func(impl string, f func(memResult) float64) float64 {
			var xs []float64
			for _, m := range mem {
				if m.impl == impl {
					xs = append(xs, f(m))
				}
			}
			return median(xs)
		}
		d := func(m memResult) float64 { return m.delta }
		u := func(m memResult) float64 { return m.usage }
		fmt.Printf("\n### Memory (%d buckets, keys of equal length)\n\n| implementation | used_memory delta B/bucket | MEMORY USAGE B/key |\n|---|---|---|\n", *flagBuckets)
		for _, impl := range []string{"tollgate", "redis_rate"} {
			fmt.Printf("| %s | %.1f | %.1f |\n", impl, mm(impl, d), mm(impl, u))
		}
		fmt.Printf("\n- bytes per bucket: %.2fx redis_rate (target <= 1.0)\n", mm("tollgate", d)/mm("redis_rate", d))
	}
}
