package test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The flood on a real tollgate-rls process: floodWorkers goroutines, each a
// caller that sends its next ShouldRateLimit for the flooding tenant
// floodPause after the answer to the last, over floodConns gRPC
// connections (as a few Envoys would), for floodFor, while a calm tenant
// sends calmRate calls a second.
//
// The service, its Redis (a private server, healthy) and this load
// generator share the machine's two cores. floodPause is the Gin example's
// flood test's (examples/e2e), for the same reason: a process starved of
// CPU for longer than the probe's deadline (2 timeouts, 200 ms) reads its
// starvation as the store's silence (docs/reliability.md), which is the
// machine's limit, not the flood's. It offers at most 15,000 calls a
// second, still 7,500 times the flooding tenant's refill rate. The race
// detector slows the service far more than the load generator: the pause
// is ten times as long, and the calm tenant's share is a figure of the
// machine's speed, logged but not asserted under race; the claims (the
// flooder's bound, no unchecked OK for either tenant, no Unavailable for
// the calm tenant, no store error, no failed-open decision) are asserted
// in both. A calm call shed (OVER_LIMIT: its tier admits all it sends)
// counts as a missing OK within the 10% the calm tenant may lose.
const (
	floodWorkers = 3000
	floodConns   = 4
	calmRate     = 100
	floodFor     = 3 * time.Second
	// callWithin bounds every call.
	callWithin = 20 * time.Second
)

var floodPause = map[bool]time.Duration{false: 200 * time.Millisecond, true: 2 * time.Second}[raceEnabled]

// The flooding tenant is on tier free (20 burst, 2/s, the built-in tiers'
// own); the calm tenant on a tier that admits everything it sends, so that
// every shed or degraded answer shows as a missing admission. Timeout and
// failure policy are the defaults (100 ms, open).
const (
	floodCapacity, floodRefill = 20, 2.0
	calmCapacity, calmRefill   = 100, 2.0 * calmRate
	floodTiers                 = `version: 1
default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
  calm:
    classes:
      default: {capacity: 100, refill_per_second: 200}
`
)

var (
	rlsBuild    sync.Once
	rlsBin      string
	rlsBuildErr error
)

// rlsBinary builds the tollgate-rls command (with -race when this test
// binary has it) once per test binary; TestMain removes it at the end.
func rlsBinary(t *testing.T) string {
	t.Helper()
	rlsBuild.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-rls-")
		if err != nil {
			rlsBuildErr = err
			return
		}
		args := []string{"build"}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "-o", filepath.Join(dir, "tollgate-rls"), ".")
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join("..", "cmd", "tollgate-rls")
		if out, err := cmd.CombinedOutput(); err != nil {
			rlsBuildErr = errors.New("go " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out))
			return
		}
		rlsBin = filepath.Join(dir, "tollgate-rls")
	})
	if rlsBuildErr != nil {
		t.Fatal(rlsBuildErr)
	}
	return rlsBin // removed by TestMain, after every test that runs it
}

// rlsProcess is tollgate-rls running as an OS process.
type rlsProcess struct {
	cmd  *exec.Cmd
	out  *testkit.LogBuffer
	done chan struct{}
	err  error
}

// startRLS runs the built command with env added to the environment; the
// cleanup kills it if the test did not stop it.
func startRLS(t *testing.T, env ...string) *rlsProcess {
	t.Helper()
	p := &rlsProcess{out: &testkit.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(rlsBinary(t))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "ADDR", "METRICS_ADDR", "REDIS_URL", "TOLLGATE_CONFIG", "DATABASE_URL", "RLS_CONFIG", "RLS_TRUST_TIER":
		default:
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = time.Second
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("tollgate-rls output:\n%s", p.out.String())
		}
	})
	return p
}

// stopRLS sends SIGTERM and requires exit status 0 within 15 s.
func stopRLS(t *testing.T, p *rlsProcess) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("tollgate-rls did not exit within 15 s of SIGTERM")
	}
	if p.err != nil {
		t.Errorf("tollgate-rls after SIGTERM: %v", p.err)
	}
	if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
		t.Error("tollgate-rls reported a data race")
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// rlsTally counts the answers one tenant got. OK without a current limit
// is a pass the limiter did not check (failed open).
type rlsTally struct {
	admitted, unchecked, overLimit, unavailable, other atomic.Int64
	mu                                                 sync.Mutex
	firstErrs                                          []string
}

func (c *rlsTally) count(res *rlsv3.RateLimitResponse, err error) {
	switch {
	case status.Code(err) == codes.Unavailable:
		c.unavailable.Add(1)
		c.note(err)
	case err != nil:
		c.other.Add(1)
		c.note(err)
	case res.GetOverallCode() == rlsv3.RateLimitResponse_OK && res.GetStatuses()[0].GetCurrentLimit() != nil:
		c.admitted.Add(1)
	case res.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		c.unchecked.Add(1)
	case res.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		c.overLimit.Add(1)
	default:
		c.other.Add(1)
		c.note(errors.New(res.GetOverallCode().String()))
	}
}

func (c *rlsTally) note(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.firstErrs) < 5 {
		c.firstErrs = append(c.firstErrs, err.Error())
	}
}

func (c *rlsTally) String() string {
	return "OK " + itoa(c.admitted.Load()) + ", unchecked OK " + itoa(c.unchecked.Load()) + ", OVER_LIMIT " + itoa(c.overLimit.Load()) +
		", Unavailable " + itoa(c.unavailable.Load()) + ", other " + itoa(c.other.Load()) + " " + strings.Join(c.firstErrs, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func tenantRequest(tenant, tier string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
		{Key: "tenant", Value: tenant}, {Key: "tier", Value: tier},
	}}}}
}

func call(c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callWithin)
	defer cancel()
	return c.ShouldRateLimit(ctx, req)
}

// sendCalmRLS sends calmRate calls a second for d, each on its own
// goroutine (as Envoy sends each request's call), on a fixed schedule, and
// waits for every answer.
func sendCalmRLS(tally *rlsTally, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, d time.Duration) {
	var wg sync.WaitGroup
	start := time.Now()
	for i := range int(d.Seconds() * calmRate) {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / calmRate)))
		wg.Go(func() { tally.count(call(c, req)) })
	}
	wg.Wait()
}

// tollgate-rls as a real process, Redis healthy, one tenant flooding it
// with 3,000 concurrent callers: the flooding tenant's OK answers stay
// within its bucket's bound and none is an unchecked pass (its excess is
// OVER_LIMIT, shed or denied); the calm tenant is never answered
// Unavailable nor passed unchecked, never admitted above its bound, and
// gets at least 90% of the OKs it gets in the same run without the flood;
// no store error is counted and the breaker never opens. Before the
// limiter shed a check it could not make in time, the flood's timeouts
// opened the breaker and the flooder got some 13,000 unchecked OKs.
func TestFloodOfOneTenantOnRLS(t *testing.T) {
	srv := redistest.NewServer(t)
	// the premise is a healthy Redis: the flood starves the service, not the store
	if err := srv.Favor(); err != nil {
		t.Logf("the private Redis runs at the test's priority: %v", err)
	}
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte(floodTiers), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, maddr := freeLoopback(t), freeLoopback(t)
	p := startRLS(t, "ADDR="+addr, "METRICS_ADDR="+maddr, "REDIS_URL="+srv.URL(), "TOLLGATE_CONFIG="+cfg, "RLS_TRUST_TIER=true")

	var clients []rlsv3.RateLimitServiceClient
	var conns []*grpc.ClientConn
	for range floodConns + 1 { // the last is the calm tenant's
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		clients = append(clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	waitServing(t, p, conns[floodConns])
	calmClient := clients[floodConns]

	prefix := "flood-" + time.Now().Format("150405.000000")
	// each tenant's first call is made before its phase (and counted), so
	// that its quota lookup is not part of the flood
	alone, beside, flood := &rlsTally{}, &rlsTally{}, &rlsTally{}
	aloneReq, besideReq := tenantRequest(prefix+"-calm-alone", "calm"), tenantRequest(prefix+"-calm-beside", "calm")
	floodReq := tenantRequest(prefix+"-flood", "free")
	alone.count(call(calmClient, aloneReq))
	sendCalmRLS(alone, calmClient, aloneReq, floodFor)
	beside.count(call(calmClient, besideReq))

	halt := make(chan struct{})
	var wg sync.WaitGroup
	begin := time.Now()
	flood.count(call(clients[0], floodReq))
	for i := range floodWorkers {
		c := clients[i%floodConns]
		wg.Go(func() {
			for {
				select {
				case <-halt:
					return
				default:
				}
				flood.count(call(c, floodReq))
				select {
				case <-halt:
					return
				case <-time.After(floodPause):
				}
			}
		})
	}
	// the calm tenant starts once the flood is on
	time.Sleep(500 * time.Millisecond)
	sendCalmRLS(beside, calmClient, besideReq, floodFor)
	close(halt)
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(callWithin + 10*time.Second):
		t.Fatal("the flooding callers did not end")
	}
	elapsed := time.Since(begin)

	bound := floodCapacity + floodRefill*elapsed.Seconds() + 1
	calmBound := calmCapacity + calmRefill*floodFor.Seconds() + 1
	t.Logf("flood (%d callers on %d connections, race %v) for %v: %v (bound %.1f)", floodWorkers, floodConns, raceEnabled, elapsed.Round(time.Millisecond), flood, bound)
	t.Logf("calm alone: %v", alone)
	t.Logf("calm beside the flood: %v", beside)

	if n := flood.unchecked.Load(); n != 0 {
		t.Errorf("the flooding tenant got %d unchecked OKs", n)
	}
	if n := flood.admitted.Load(); float64(n) > bound {
		t.Errorf("the flooding tenant got %d OKs, bound %.1f", n, bound)
	}
	if flood.overLimit.Load() == 0 {
		t.Error("the flooding tenant never got OVER_LIMIT: no flood reached the limiter")
	}
	if n := alone.admitted.Load(); n*10 < int64(floodFor.Seconds()*calmRate)*9 {
		t.Errorf("the calm tenant alone: %v; want nearly all OK", alone)
	}
	if b, a := beside.admitted.Load(), alone.admitted.Load(); b*10 < a*9 && !raceEnabled {
		t.Errorf("the calm tenant got %d OKs beside the flood, %d alone: under 90%%", b, a)
	}
	for what, tally := range map[string]*rlsTally{"alone": alone, "beside the flood": beside} {
		if n := tally.admitted.Load(); float64(n) > calmBound {
			t.Errorf("the calm tenant %s got %d OKs, bound %.1f", what, n, calmBound)
		}
		if tally.unchecked.Load()+tally.unavailable.Load()+tally.other.Load() != 0 {
			t.Errorf("the calm tenant %s was degraded: %v", what, tally)
		}
	}

	// the service's own account: no store failure, no breaker, no
	// unchecked pass
	body := metrics(t, "http://"+maddr+"/metrics")
	for line := range strings.Lines(body) {
		switch {
		case strings.HasPrefix(line, "tollgate_store_errors_total") && !zeroSample(line):
			t.Errorf("a store error was counted during a flood on a healthy Redis: %s", line)
		case strings.HasPrefix(line, "tollgate_decisions_total{") && strings.Contains(line, `outcome="failed_open"`) && !zeroSample(line):
			t.Errorf("a decision failed open: %s", line)
		case strings.HasPrefix(line, "tollgate_checks_shed_total{"):
			t.Logf("metrics: %s", strings.TrimSpace(line))
		}
	}
	for _, cc := range conns {
		_ = cc.Close()
	}
	stopRLS(t, p)
}

// waitServing polls the health service until it answers SERVING, failing
// at once if the process exits first.
func waitServing(t *testing.T, p *rlsProcess, cc *grpc.ClientConn) {
	t.Helper()
	h := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(45 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("tollgate-rls exited before it served (%v):\n%s", p.err, p.out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tollgate-rls not serving within 45 s (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metrics reads a Prometheus text exposition.
func metrics(t *testing.T, url string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, res.StatusCode, err)
	}
	return string(b)
}

// zeroSample reports whether a Prometheus text line's value is 0.
func zeroSample(line string) bool {
	f := strings.Fields(line)
	return len(f) >= 2 && f[len(f)-1] == "0"
}
