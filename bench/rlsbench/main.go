// Command rlsbench runs tollgate-rls and envoyproxy/ratelimit side by side
// (make bench/rls; docs/benchmarks.md): each service with a private Redis,
// both pinned with their Redis to one core and the load generator (ghz) to
// the other, at several concurrencies, over many tenants and one hot
// tenant, interleaved, repeated; then the window-boundary probe. A third
// service, the floor (floor.go), does one Redis command per call and
// nothing else: what no rate limit service can go below. It prints the
// medians as Markdown.
package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/tollgate-go/tollgate/bench/internal/stats"
	"github.com/tollgate-go/tollgate/bench/internal/svgplot"
)

const (
	referenceModule  = "github.com/envoyproxy/ratelimit"
	referenceVersion = "v1.4.1-0.20260122083618-3fb702589d36"
	ghzVersion       = "v0.120.0"
)

// config: a limit no load reaches (the loads measure the work of a
// check), and the probe's 100 per second.
const config = `domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100000000}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 100}
`

const tierFile = `version: 1
default_tier: free
timeout: 5s
failure_policy: closed
header_style: none
tiers:
  free:
    classes:
      default: {capacity: 1, refill_per_second: 1}
`

var (
	reps     = flag.Int("reps", 3, "repetitions of each measurement (medians)")
	duration = flag.Duration("duration", 4*time.Second, "length of one ghz run")
	concs    = flag.String("c", "16,64,256", "ghz concurrencies")
	rate     = flag.Int("rps", 2000, "the fixed offered rate (ghz --rps) at concurrency 64")
	loadCPU  = flag.String("load-cpu", "0", "the core ghz runs on (taskset -c)")
	svcCPU   = flag.String("service-cpu", "1", "the core the services and their Redis run on")
	svgDir   = flag.String("svg", "", "write the window-boundary probe's picture (SVG) into this directory")
	// the floor service's own flags: run starts this binary with them
	floorServe = flag.String("floor-serve", "", "serve the floor (one INCR per call) on this address; internal")
	floorRedis = flag.String("floor-redis", "", "the floor's Redis address; internal")
)

func main() {
	flag.Parse()
	if *floorServe != "" {
		if err := serveFloor(*floorServe, *floorRedis); err != nil {
			fmt.Fprintln(os.Stderr, "rlsbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// proc is a started process with its CPU time readable.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func start(cpu string, env []string, name string, args ...string) (*proc, error) {
	cmd := exec.Command("taskset", append([]string{"-c", cpu, name}, args...)...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, out: &out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// cpu is the process's user+system CPU time so far (taskset execs, so the
// pid is the program's).
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // CLK_TCK 100
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// service is one rate limit service under test with its Redis.
type service struct {
	name  string
	addr  string
	svc   *proc
	redis *proc
}

func startRedis() (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := start(*svcCPU, os.Environ(), "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return p, addr, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, "", fmt.Errorf("redis-server at %s did not start: %s", addr, p.out)
		}
	}
}

// waitReady waits until addr answers ShouldRateLimit.
func waitReady(s *service) error {
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	c := rlsv3.NewRateLimitServiceClient(cc)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "x", Value: "y"}}}}})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within a minute: %v\n%s", s.name, err, s.svc.out)
		}
	}
}

func findBinary(name, module, version string) (string, error) {
	var cands []string
	if p, err := exec.LookPath(name); err == nil {
		cands = append(cands, p)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		cands = append(cands, filepath.Join(strings.Split(strings.TrimSpace(string(out)), string(os.PathListSeparator))[0], "bin", name))
	}
	if cache, err := os.UserCacheDir(); err == nil && name == "service_cmd" {
		cands = append(cands, filepath.Join(cache, "tollgate-test", "envoy-ratelimit@"+version, name))
	}
	for _, c := range cands {
		if bi, err := buildinfo.ReadFile(c); err == nil && bi.Main.Path == module && bi.Main.Version == version {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s %s@%s not found; install it: (cd /tmp && GOWORK=off go install %s@%s)", name, module, version, module, version)
}

func run() error {
	for _, tool := range []string{"taskset", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s on PATH", tool)
		}
	}
	ref, err := findBinary("service_cmd", referenceModule, referenceVersion)
	if err != nil {
		return err
	}
	ghz, err := findBinary("ghz", "github.com/bojand/ghz", ghzVersion)
	if err != nil {
		return fmt.Errorf("%w (the package is github.com/bojand/ghz/cmd/ghz)", err)
	}
	tmp, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	tg := filepath.Join(tmp, "tollgate-rls")
	build := exec.Command("go", "build", "-o", tg, "github.com/tollgate-go/tollgate/rls/cmd/tollgate-rls")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build tollgate-rls: %v\n%s", err, out)
	}
	protoset := filepath.Join(tmp, "rls.protoset")
	if err := writeProtoset(protoset); err != nil {
		return err
	}
	cfgDir := filepath.Join(tmp, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(config), 0o600); err != nil {
		return err
	}
	// tollgate-rls fails closed with a long timeout (a check it could not
	// make is an error here, never a cheap pass) and adds no headers, as
	// the reference by default
	tiers := filepath.Join(tmp, "tollgate.yaml")
	if err := os.WriteFile(tiers, []byte(tierFile), 0o600); err != nil {
		return err
	}

	var services []*service
	defer func() {
		for _, s := range services {
			s.svc.stop()
			s.redis.stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, name := range []string{"tollgate-rls", "envoyproxy/ratelimit", floorName} {
		r, raddr, err := startRedis()
		if err != nil {
			return err
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		s := &service{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), redis: r}
		services = append(services, s)
		base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		switch name {
		case "tollgate-rls":
			s.svc, err = start(*svcCPU, append(base, "ADDR="+s.addr, "METRICS_ADDR=off", "REDIS_URL=redis://"+raddr+"/0", "RLS_CONFIG="+cfgDir, "TOLLGATE_CONFIG="+tiers), tg)
		case floorName:
			s.svc, err = start(*svcCPU, base, self, "-floor-serve", s.addr, "-floor-redis", raddr)
		default:
			p1, _ := freePort()
			p2, _ := freePort()
			s.svc, err = start(*svcCPU, append(base, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+raddr,
				"RUNTIME_ROOT="+filepath.Join(tmp, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
				"USE_STATSD=false", "LOG_LEVEL=warn", "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(port),
				"HOST=127.0.0.1", "PORT="+strconv.Itoa(p1), "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(p2)), ref)
		}
		if err != nil {
			return err
		}
		if err := waitReady(s); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "rlsbench: ghz on cpu %s; services and Redis on cpu %s; %d x %v per point\n", *loadCPU, *svcCPU, *reps, *duration)

	results := map[key][]sample{}
	var cs []int
	for _, c := range strings.Split(*concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: bad concurrency %q", c)
		}
		cs = append(cs, n)
	}
	loads := []string{"many tenants", "one hot tenant"}
	// warm both (connections, scripts)
	for _, s := range services {
		if _, err := runGhz(ghz, protoset, s, loads[0], 16, 0, time.Second); err != nil {
			return err
		}
	}
	for rep := range *reps {
		for _, load := range loads {
			for _, c := range append(slices.Clone(cs), -64) { // -64: the fixed rate at 64
				// each service goes first in turn
				order := append(slices.Clone(services[rep%len(services):]), services[:rep%len(services)]...)
				for _, s := range order {
					conc, rps := c, 0
					if c < 0 {
						conc, rps = -c, *rate
					}
					sm, err := runGhz(ghz, protoset, s, load, conc, rps, *duration)
					if err != nil {
						return err
					}
					k := key{load, c, s.name}
					results[k] = append(results[k], sm)
					fmt.Fprintf(os.Stderr, "rlsbench: %s c=%d rps=%d %s: %.0f req/s, p99 %v, service %.1f µs/req, redis %.1f µs/req, errors %v\n",
						load, conc, rps, s.name, sm.rps, sm.p99, sm.svcCPU, sm.redisCPU, sm.errors)
				}
			}
		}
	}
	var probes []probe
	for rep := range *reps {
		for _, s := range services[:2] { // the floor never denies
			p, err := boundaryProbe(s, rep)
			if err != nil {
				return err
			}
			probes = append(probes, p)
		}
	}
	report(results, loads, cs, probes)
	if *svgDir != "" {
		return boundaryPicture(filepath.Join(*svgDir, "rls-boundary.svg"), probes)
	}
	return nil
}

type key struct {
	load string
	c    int // negative: the fixed rate at -c
	svc  string
}

type sample struct {
	rps, svcCPU, redisCPU float64 // CPU in µs per request
	p50, p99              time.Duration
	errors                map[string]int
}

type ghzReport struct {
	Count               int64   `json:"count"`
	Rps                 float64 `json:"rps"`
	LatencyDistribution []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
	StatusCodeDistribution map[string]int `json:"statusCodeDistribution"`
}

func runGhz(ghz, protoset string, s *service, load string, c, rps int, d time.Duration) (sample, error) {
	value := "t{{.RequestNumber}}"
	if load == "one hot tenant" {
		value = "hot"
	}
	data := `{"domain":"bench","descriptors":[{"entries":[{"key":"tenant","value":"` + value + `"}]}]}`
	args := []string{"-c", *loadCPU, ghz, "--insecure", "--protoset", protoset,
		"--call", "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit",
		"-d", data, "-c", strconv.Itoa(c), "-z", d.String(), "--format", "json", "--connections", strconv.Itoa(max(1, c/16))}
	if rps > 0 {
		args = append(args, "--rps", strconv.Itoa(rps))
	}
	args = append(args, s.addr)
	c0, r0 := s.svc.cpu(), s.redis.cpu()
	out, err := exec.Command("taskset", args...).Output()
	c1, r1 := s.svc.cpu(), s.redis.cpu()
	if err != nil && len(out) == 0 {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return sample{}, fmt.Errorf("ghz: %v\n%s", err, ee.Stderr)
		}
		return sample{}, fmt.Errorf("ghz: %w", err)
	}
	var rep ghzReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return sample{}, fmt.Errorf("ghz output: %w\n%.500s", err, out)
	}
	sm := sample{rps: rep.Rps}
	for _, l := range rep.LatencyDistribution {
		switch l.Percentage {
		case 50:
			sm.p50 = l.Latency
		case 99:
			sm.p99 = l.Latency
		}
	}
	for code, n := range rep.StatusCodeDistribution {
		if code != "OK" {
			if sm.errors == nil {
				sm.errors = map[string]int{}
			}
			sm.errors[code] += n
		}
	}
	if rep.Count > 0 {
		sm.svcCPU = float64((c1 - c0).Microseconds()) / float64(rep.Count)
		sm.redisCPU = float64((r1 - r0).Microseconds()) / float64(rep.Count)
	}
	return sm, nil
}

type probe struct {
	svc            string
	sent, admitted int64
	// admits: when each admitted call was answered, seconds from the
	// probe's start (probeLead before the second boundary), in order
	admits []float64
}

// probeLead is how long before a second boundary the probe starts, and
// how long after it it ends.
const probeLead = 100 * time.Millisecond

// probeLimit is the probe descriptor's requests_per_unit, per second: a
// bucket of that capacity refilled at that rate.
const probeLimit = 100

// boundaryProbe sends one descriptor (limit 100 per second) as fast as
// 16 callers can from 100 ms before a second boundary to 100 ms after, and
// counts the admitted: a fixed window admits up to 200 (100 on each side),
// a bucket at most its capacity plus 0.2 s of refill, 120.
func boundaryProbe(s *service, rep int) (probe, error) {
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return probe{}, err
	}
	defer func() { _ = cc.Close() }()
	c := rlsv3.NewRateLimitServiceClient(cc)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
		{Key: "probe", Value: "p" + strconv.Itoa(rep) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}}}}}
	// connect first
	ctx0, cancel0 := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = c.ShouldRateLimit(ctx0, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "x", Value: "y"}}}}})
	cancel0()
	now := time.Now()
	boundary := now.Truncate(time.Second).Add(2 * time.Second)
	start := boundary.Add(-probeLead)
	time.Sleep(time.Until(start))
	end := boundary.Add(probeLead)
	var sent, admitted atomic.Int64
	var mu sync.Mutex
	var admits []float64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				res, err := c.ShouldRateLimit(ctx, req)
				cancel()
				if !time.Now().Before(end.Add(50 * time.Millisecond)) {
					return // answered too late to count inside the 0.2 s
				}
				sent.Add(1)
				if err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
					at := time.Since(start).Seconds()
					mu.Lock()
					admits = append(admits, at)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(admits)
	return probe{s.name, sent.Load(), admitted.Load(), admits}, nil
}

func med(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return stats.Median(xs)
}

func report(results map[key][]sample, loads []string, cs []int, probes []probe) {
	const t, r = "tollgate-rls", "envoyproxy/ratelimit"
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	// the floor's columns: its service+Redis CPU per request, what that is
	// of the reference's (no service can go below it), and how much of
	// the reference's cost above the floor tollgate-rls pays
	fmt.Println("| load | callers | req/s tollgate / reference (ratio) | p50 ms | p99 ms | service CPU µs/req | Redis CPU µs/req | service+Redis ratio | floor service+Redis µs/req (of the reference's) | above the floor: tollgate / reference |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, load := range loads {
		for _, c := range append(slices.Clone(cs), -64) {
			a, b, f := results[key{load, c, t}], results[key{load, c, r}], results[key{load, c, floorName}]
			callers := strconv.Itoa(c)
			if c < 0 {
				callers = fmt.Sprintf("%d at %d/s", -c, *rate)
			}
			ra, rb := med(a, func(s sample) float64 { return s.rps }), med(b, func(s sample) float64 { return s.rps })
			sa, sb := med(a, func(s sample) float64 { return s.svcCPU }), med(b, func(s sample) float64 { return s.svcCPU })
			da, db := med(a, func(s sample) float64 { return s.redisCPU }), med(b, func(s sample) float64 { return s.redisCPU })
			fl := med(f, func(s sample) float64 { return s.svcCPU + s.redisCPU })
			fmt.Printf("| %s | %s | %.0f / %.0f (%.2fx) | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f | %.1f / %.1f (%.2fx) | %.2fx | %.1f (%.2fx) | %.2fx |\n",
				load, callers, ra, rb, ra/rb,
				med(a, func(s sample) float64 { return ms(s.p50) }), med(b, func(s sample) float64 { return ms(s.p50) }),
				med(a, func(s sample) float64 { return ms(s.p99) }), med(b, func(s sample) float64 { return ms(s.p99) }),
				sa, sb, da, db, da/db, (sa+da)/(sb+db), fl, fl/(sb+db), (sa+da-fl)/(sb+db-fl))
		}
	}
	fmt.Println()
	fmt.Println("| window-boundary probe (100/s, 0.2 s across a second boundary) | sent | admitted |")
	fmt.Println("|---|---|---|")
	for _, p := range probes {
		fmt.Printf("| %s | %d | %d |\n", p.svc, p.sent, p.admitted)
	}
	errs := map[string]map[string]int{}
	for k, ss := range results {
		for _, s := range ss {
			for code, n := range s.errors {
				if errs[k.svc] == nil {
					errs[k.svc] = map[string]int{}
				}
				errs[k.svc][code] += n
			}
		}
	}
	for svc, m := range errs {
		fmt.Printf("\n%s: calls answered an error, by code: %v\n", svc, m)
	}
}

// writeProtoset writes the rate limit service's descriptors, from
// go-control-plane's, for ghz (the reference serves no reflection).
func writeProtoset(path string) error {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// boundaryPicture draws the last probe of each service as admissions over
// time against the bucket's bound from full (capacity + refill x t) and a
// fixed window's (the limit on each side of the boundary).
func boundaryPicture(path string, probes []probe) error {
	last := map[string]probe{}
	var names []string
	for _, p := range probes {
		if _, ok := last[p.svc]; !ok {
			names = append(names, p.svc)
		}
		last[p.svc] = p
	}
	span := (2 * probeLead).Seconds()
	var lines []svgplot.Series
	for i, n := range names {
		p := last[n]
		s := svgplot.Series{Name: fmt.Sprintf("%s: %d admitted", n, len(p.admits)), X: []float64{0}, Y: []float64{0}, Color: svgplot.Color(i)}
		for j, t := range p.admits {
			s.X, s.Y = append(s.X, t), append(s.Y, float64(j+1))
		}
		s.X, s.Y = append(s.X, span), append(s.Y, float64(len(p.admits)))
		lines = append(lines, s)
	}
	if len(lines) == 0 {
		return nil
	}
	lead := probeLead.Seconds()
	lines = append(lines,
		svgplot.Series{Name: fmt.Sprintf("bucket bound: %d + %d/s x t", probeLimit, probeLimit), X: []float64{0, span}, Y: []float64{probeLimit, probeLimit * (1 + span)}, Dashed: true, Smooth: true, Color: "#000000"},
		svgplot.Series{Name: fmt.Sprintf("fixed window: %d on each side of the boundary", probeLimit), X: []float64{0, lead, lead, span}, Y: []float64{probeLimit, probeLimit, 2 * probeLimit, 2 * probeLimit}, Dashed: true, Smooth: true, Color: "#888888"},
	)
	l := svgplot.Lines{
		Title:  fmt.Sprintf("One descriptor at %d/s, 16 callers across a second boundary: admissions over time (the last of %d probes)", probeLimit, *reps),
		XLabel: fmt.Sprintf("seconds since the probe began, %v before the boundary", probeLead),
		YLabel: "calls admitted", Series: lines,
	}
	return svgplot.Write(path, l.SVG())
}
