package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/keys"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// examplesTiers is the services' tier file, as the examples ship it.
var examplesTiers = filepath.Join("..", "..", "..", "examples", "tollgate.yaml")

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// reportsHit is a gateway's hit (negative: its negative hit, sent when the
// request ends) on tenant's reports class.
func reportsHit(tenant string, negative bool) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries:        []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}, {Key: "class", Value: "reports"}},
		IsNegativeHits: negative,
	}}}
}

// hitCode sends req and returns its code; an answer without the class's
// limit is a check that failed open (the store slower than the tier file's
// timeout), which fails t rather than pass for an admission.
func hitCode(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !req.GetDescriptors()[0].GetIsNegativeHits() && res.GetStatuses()[0].GetCurrentLimit() == nil {
		t.Fatalf("%v answered %v: failed open (no limit), the store slower than the tier file's timeout", req, res)
	}
	return res.GetOverallCode()
}

// TestServeGatewayConcurrency: tollgate-rls starts on the services' tier
// file as the examples ship it (class reports: 2 in flight for tier free),
// and two tollgate-rls processes on one Redis hold 2 in flight at the
// gateway between them, a negative hit freeing a slot whichever process
// it reaches. A gateway killed (kill -9) while it holds slots never sends
// their negative hits: they return TOLLGATE_SLOT_MAX_HOLD after its hits,
// plus at most the tier file's check timeout (docs/envoy.md), measured.
func TestServeGatewayConcurrency(t *testing.T) {
	if os.Getenv("TOLLGATE_TEST_GATEWAY") != "" {
		t.Skip("the helper gateway process runs TestGatewayProcess only")
	}
	cfg, err := config.Load(examplesTiers)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tiers.Tiers["free"].Classes["reports"].Concurrency != 2 {
		t.Fatalf("examples/tollgate.yaml: free reports = %+v, want 2 in flight", cfg.Tiers.Tiers["free"].Classes["reports"])
	}
	const hold = 3 * time.Second
	addr := redisProcess(t, "")
	env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "REDIS_URL": "redis://" + addr + "/0",
		"TOLLGATE_CONFIG": examplesTiers, "TOLLGATE_SLOT_MAX_HOLD": hold.String()}
	gA, _ := serve(t, env)
	gB, _ := serve(t, env)
	a, b := rlsClient(t, gA), rlsClient(t, gB)

	hit, neg := reportsHit("t1", false), reportsHit("t1", true)
	steps := []struct {
		name string
		c    rlsv3.RateLimitServiceClient
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"hit at A", a, hit, rlsv3.RateLimitResponse_OK},
		{"hit at B", b, hit, rlsv3.RateLimitResponse_OK},
		{"third hit at A", a, hit, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"third hit at B", b, hit, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"negative hit at A", a, neg, rlsv3.RateLimitResponse_OK},
		{"hit at B", b, hit, rlsv3.RateLimitResponse_OK},
		{"hit at A", a, hit, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"negative hit at B", b, neg, rlsv3.RateLimitResponse_OK},
		{"negative hit at B (A's slot)", b, neg, rlsv3.RateLimitResponse_OK},
		{"hit at A", a, hit, rlsv3.RateLimitResponse_OK},
		{"hit at A", a, hit, rlsv3.RateLimitResponse_OK},
		{"hit at B", b, hit, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"negative hit at B", b, neg, rlsv3.RateLimitResponse_OK},
		{"negative hit at A", a, neg, rlsv3.RateLimitResponse_OK},
	}
	for _, s := range steps {
		if got := hitCode(t, s.c, s.req); got != s.want {
			t.Fatalf("%s: %v, want %v", s.name, got, s.want)
		}
		if s.want == rlsv3.RateLimitResponse_OVER_LIMIT {
			// Envoy sends a denied request's negative hit too: it frees nothing
			hitCode(t, s.c, neg)
		}
	}

	// a gateway process takes both of t2's slots at A, and is killed
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	ks, _ := keys.New(core.DefaultPrefix)
	key, err := ks.Slots("t2", "reports")
	if err != nil {
		t.Fatal(err)
	}
	live := func() int64 {
		now, err := rc.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := rc.ZCount(context.Background(), key, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	gw := exec.Command(os.Args[0], "-test.run=^TestGatewayProcess$", "-test.count=1")
	gw.Env = append(os.Environ(), "TOLLGATE_TEST_GATEWAY="+gA)
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := gw.StdinPipe() // never closed: the gateway waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	start := time.Now()
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Process.Kill(); _ = gw.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held 2\n" {
		t.Fatalf("gateway process: %q, %v", line, err)
	}
	hitEnd := time.Now()
	if err := gw.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = gw.Wait()
	if n := live(); n != 2 {
		t.Fatalf("%d of t2's slots held after the gateway's kill; want its 2", n)
	}
	if got := hitCode(t, b, reportsHit("t2", false)); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a hit at B while the dead gateway's slots are held: %v", got)
	}
	timeout := 100 * time.Millisecond // the tier file's
	const poll = 20 * time.Millisecond
	for deadline := hitEnd.Add(hold + 10*time.Second); ; time.Sleep(poll) {
		p := time.Now()
		n := live()
		if n == 0 {
			if early := time.Since(start); early < hold {
				t.Fatalf("the dead gateway's slots freed %v after it started, before the hold time %v", early, hold)
			}
			took := time.Since(p)
			if late := p.Sub(hitEnd); late > hold+timeout+poll+took {
				t.Fatalf("the dead gateway's slots freed %v after its hits; the bound is the hold %v + the check timeout %v", late, hold, timeout)
			}
			t.Logf("kill -9 of a gateway holding 2 slots: both free %v after its hits (hold %v, check timeout %v)", p.Sub(hitEnd).Round(time.Millisecond), hold, timeout)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still held %v after the dead gateway's hits (hold %v)", n, time.Since(hitEnd), hold)
		}
	}
	if got := hitCode(t, b, reportsHit("t2", false)); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a hit at B after the slots returned: %v", got)
	}
}

// TestGatewayProcess is the gateway TestServeGatewayConcurrency kills: run
// only as its child, it takes two slots of t2's reports at the
// tollgate-rls in TOLLGATE_TEST_GATEWAY, says so, and waits to be killed.
func TestGatewayProcess(t *testing.T) {
	addr := os.Getenv("TOLLGATE_TEST_GATEWAY")
	if addr == "" {
		t.Skip("run by TestServeGatewayConcurrency only")
	}
	c := rlsClient(t, addr)
	for range 2 {
		if got := hitCode(t, c, reportsHit("t2", false)); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("gateway hit: %v", got)
		}
	}
	_, _ = os.Stdout.WriteString("held 2\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // killed here
	t.Fatal("not killed")
}
