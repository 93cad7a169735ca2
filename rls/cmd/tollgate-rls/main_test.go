package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core/config"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs the command with env until t ends, and returns the addresses
// of its gRPC and metrics listeners once both listen. A start-up error, no
// listener within 20 s, or an error or hang after the cancel fails t.
func serve(t *testing.T, env map[string]string) (grpcAddr, metricsAddr string) {
	t.Helper()
	a := serveAll(t, env)
	return a.grpc, a.metrics
}

// addrs are the command's listeners: gRPC, metrics ("off": none) and the
// reference's HOST:PORT ("": none).
type addrs struct{ grpc, metrics, http string }

// serveAll is serve, with every listener's address.
func serveAll(t *testing.T, env map[string]string) addrs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer // read only once run has returned
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, &logs, func(g, m, h string) { ready <- addrs{g, m, h} })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after cancel: %v\n%s", err, logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not return 20 s after cancel")
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		done <- nil // reported here, not again by the cleanup
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("not listening after 20 s")
	}
	return addrs{}
}

// The command serves ShouldRateLimit from the tier file, health,
// reflection and /metrics, and stops when its context ends.
func TestServe(t *testing.T) {
	// a generous store timeout, failing closed: on a loaded machine a check
	// must neither fail open (a silent pass) nor time out
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\ndefault_tier: free\ntimeout: 5s\nfailure_policy: closed\ntiers:\n  free:\n    classes:\n      default: {capacity: 2, refill_per_second: 0.01}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0", "TOLLGATE_CONFIG": cfg}
	grpcAddr, metricsAddr := serve(t, env)

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t42"}}},
	}}
	var codes []string
	for range 3 {
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(cctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, res.GetOverallCode().String())
	}
	if got := strings.Join(codes, " "); got != "OK OK OVER_LIMIT" {
		t.Errorf("codes = %s, want OK OK OVER_LIMIT (capacity 2 from the tier file)", got)
	}

	// the tier file is reloaded on change: a new capacity applies to new buckets
	if err := os.WriteFile(cfg, []byte("version: 1\ndefault_tier: free\ntimeout: 5s\nfailure_policy: closed\ntiers:\n  free:\n    classes:\n      default: {capacity: 50, refill_per_second: 0.01}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reloaded := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !reloaded; time.Sleep(200 * time.Millisecond) {
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "fresh-" + time.Now().Format("150405.000000")}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		reloaded = res.GetStatuses()[0].GetLimitRemaining() == 49
	}
	if !reloaded {
		t.Error("capacity 50 not in force 15 s after the tier file changed")
	}

	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v", svc, h, err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if !strings.Contains(rr.String(), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v", rr)
	}

	mreq, _ := http.NewRequestWithContext(cctx, "GET", "http://"+metricsAddr+"/metrics", nil)
	mres, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mres.Body)
	_ = mres.Body.Close()
	if !strings.Contains(string(body), "tollgate_decisions_total") || !strings.Contains(string(body), `reason="over_limit"`) {
		t.Errorf("/metrics lacks the decisions:\n%.3000s", body)
	}
}

// A bad tier file is a clear start-up error.
func TestServeBadConfig(t *testing.T) {
	env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "TOLLGATE_CONFIG": filepath.Join(t.TempDir(), "missing.yaml")}
	err := run(context.Background(), func(k string) string { return env[k] }, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_CONFIG") {
		t.Fatalf("run with a missing file: %v", err)
	}
}

// TOLLGATE_SLOT_MAX_HOLD takes a duration from 0 to rls.MaxSlotHold; any
// other value stops the start, naming it.
func TestServeBadSlotHold(t *testing.T) {
	for _, v := range []string{"soon", "-1s", "25h"} {
		env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "TOLLGATE_SLOT_MAX_HOLD": v}
		err := run(context.Background(), func(k string) string { return env[k] }, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SLOT_MAX_HOLD") {
			t.Errorf("TOLLGATE_SLOT_MAX_HOLD=%s: %v", v, err)
		}
	}
}

const envoyConfig = `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: class
        value: export
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: tier
    value: pro
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: class
        value: export
        rate_limit: {unit: hour, requests_per_unit: 720, unit_multiplier: 2}
  - key: tenant
    value: t42
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tier
    value: unlimited
    rate_limit: {unlimited: true}
`

func TestConvert(t *testing.T) {
	var out, errs bytes.Buffer
	code := convertMain(nil, strings.NewReader(envoyConfig), &out, &errs)
	if code != 1 {
		t.Errorf("exit %d, want 1 (something left out)", code)
	}
	want := `version: 1
default_tier: "free"
tiers:
  "free":
    classes:
      "default": {capacity: 10, refill_per_second: 10}
      "export": {capacity: 30, refill_per_second: 0.5}
  "pro":
    classes:
      "default": {capacity: 100, refill_per_second: 100}
      "export": {capacity: 720, refill_per_second: 0.1}
`
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("output:\n%s\nwant it to end with:\n%s", got, want)
	}
	for _, p := range []string{"edge/tenant=t42: a limit for one tenant is an override", "edge/remote_address: only tier, tenant and class", "edge/tier=unlimited: unlimited has no tollgate equivalent"} {
		if !strings.Contains(errs.String(), p) {
			t.Errorf("stderr lacks %q:\n%s", p, errs.String())
		}
	}
	if code := convertMain(nil, strings.NewReader("domain: x\ndescriptors: [{key: tier, value: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), io.Discard, io.Discard); code != 2 {
		t.Errorf("nothing convertible: exit %d, want 2", code)
	}
}

// sampleConfig is the envoyproxy/ratelimit file docs/envoy.md tells a
// newcomer to try convert on.
const sampleConfig = "testdata/ratelimit.yaml"

// The sample converts whole (exit 0, nothing left out) into the built-in
// tiers, the examples' own, and docs/envoy.md gives the command for it.
func TestConvertSampleFile(t *testing.T) {
	var out, errs bytes.Buffer
	if code := convertMain([]string{sampleConfig}, strings.NewReader(""), &out, &errs); code != 0 {
		t.Fatalf("convert %s: exit %d, want 0\n%s", sampleConfig, code, errs.String())
	}
	if errs.Len() != 0 {
		t.Errorf("convert %s left something out:\n%s", sampleConfig, errs.String())
	}
	cfg, err := config.Parse("converted", out.Bytes())
	if err != nil {
		t.Fatalf("the converted file does not load: %v\n%s", err, out.String())
	}
	if want := builtinTiers(); !reflect.DeepEqual(cfg.Tiers, want) {
		t.Errorf("converted tiers %+v, want the built-in tiers %+v", cfg.Tiers, want)
	}
	doc, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	if cmd := "go run ./rls/cmd/tollgate-rls convert rls/cmd/tollgate-rls/" + sampleConfig; !strings.Contains(string(doc), cmd) {
		t.Errorf("docs/envoy.md does not give the command %q", cmd)
	}
}

func TestConvertRefusesUnknownKeysAndUnboundedInput(t *testing.T) {
	var errs bytes.Buffer
	in := "domain: edge\ndescriptors:\n  - key: tier\n    value: pro\n    rate_limit: {unit: second, unit_multipler: 60, requests_per_unit: 1}\n"
	if code := convertMain(nil, strings.NewReader(in), io.Discard, &errs); code != 2 {
		t.Errorf("a misspelled key: exit %d, want 2", code)
	}
	if got := errs.String(); !strings.Contains(got, "line 5: field unit_multipler not found") || strings.Contains(got, "main.") {
		t.Errorf("stderr should name the key and its line: %q", got)
	}
	errs.Reset()
	big := io.MultiReader(strings.NewReader("domain: edge\n#"), strings.NewReader(strings.Repeat("x", maxInput)))
	if code := convertMain(nil, big, io.Discard, &errs); code != 2 || !strings.Contains(errs.String(), "larger than") {
		t.Errorf("an unbounded input: exit %d, %q; want 2 and refused", code, errs.String())
	}
	// the reference's own keys are known: left out, named, not errors
	errs.Reset()
	in = "domain: edge\ndescriptors:\n  - key: tier\n    value: pro\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1, name: pro}\n  - key: path\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if code := convertMain(nil, strings.NewReader(in), io.Discard, &errs); code != 1 || !strings.Contains(errs.String(), "name and replaces") || !strings.Contains(errs.String(), "wildcard value") {
		t.Errorf("the reference's keys: exit %d, %q; want 1 with both named", code, errs.String())
	}
}

// RLS_CONFIG serves an envoyproxy/ratelimit configuration; its mistakes,
// and the options' bad values, are start-up errors.
func TestServeRules(t *testing.T) {
	env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "RLS_CONFIG": "../../testdata/readme.yaml"}
	addr, _ := serve(t, env)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "readme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t42"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.GetStatuses(); len(s) != 2 || s[0].GetCurrentLimit().GetRequestsPerUnit() != 10 || s[0].GetLimitRemaining() != 9 || s[1].GetCurrentLimit() != nil {
		t.Fatalf("answer %v: want remote_address's 10 per hour and the unmatched tenant OK without a limit", res)
	}

	for _, bad := range []map[string]string{
		{"RLS_CONFIG": filepath.Join(t.TempDir(), "missing")},
		{"RLS_CONFIG": "../../testdata/readme.yaml", "SHADOW_MODE": "yes please"},
		{"SHADOW_MODE": "true"},
	} {
		bad["ADDR"], bad["METRICS_ADDR"] = "127.0.0.1:0", "off"
		err := run(context.Background(), func(k string) string { return bad[k] }, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "RLS_CONFIG") && !strings.Contains(err.Error(), "SHADOW_MODE") {
			t.Errorf("run with %v: %v", bad, err)
		}
	}
}

// TOLLGATE_RLQS_TTL takes whole seconds from 1s to 1h and
// TOLLGATE_RLQS_IDLE_REPORTS 1 to 100; any other value stops the start,
// naming it.
func TestServeBadQuotaSettings(t *testing.T) {
	for k, vs := range map[string][]string{
		"TOLLGATE_RLQS_TTL":          {"soon", "500ms", "1.5s", "2h"},
		"TOLLGATE_RLQS_IDLE_REPORTS": {"x", "0", "101"},
	} {
		for _, v := range vs {
			env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", k: v}
			err := run(context.Background(), func(k string) string { return env[k] }, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: %v", k, v, err)
			}
		}
	}
}
