package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// MERGE_DOMAIN_CONFIG=true: two files of one domain in the RUNTIME_*
// directory are served as one domain, each file's rule in force, and a
// file added later joins it on reload; without it the start stops on the
// duplicate domain, as the reference's does.
func TestServeMergeDomainConfig(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var logs bytes.Buffer
	err := run(context.Background(), envOf(refEnv(t, root, nil)), &logs, nil)
	if err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("two files of one domain without MERGE_DOMAIN_CONFIG: %v, want the duplicate domain refused", err)
	}

	a := serveAll(t, refEnv(t, root, map[string]string{"MERGE_DOMAIN_CONFIG": "true"}))
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(v string) string {
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetOverallCode().String() + "/" + res.GetStatuses()[0].GetCurrentLimit().GetUnit().String()
	}
	got := []string{ask("a"), ask("a"), ask("b"), ask("b"), ask("b"), ask("c")}
	want := []string{"OK/HOUR", "OVER_LIMIT/HOUR", "OK/HOUR", "OK/HOUR", "OVER_LIMIT/HOUR", "OK/UNKNOWN"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("merged domain: %v, want %v (a.yaml's 1/hour, b.yaml's 2/hour, no rule for c)", got, want)
	}
	// a reload merges too: a third file of the domain joins it
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    value: c\n    rate_limit: {unit: minute, requests_per_unit: 9}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c.yaml's rule reloaded", func() bool { return ask("c") == "OK/MINUTE" })
	if got := ask("a"); got != "OVER_LIMIT/HOUR" {
		t.Errorf("after the reload, a: %s, want a.yaml's rule still in force", got)
	}
}

// MERGE_DOMAIN_CONFIG=true over xDS: two pushed resources of one domain
// are served merged; a push whose resources hold the same descriptor is
// NACKed and the merged rules in force keep answering.
func TestServeXDSMergeDomainConfig(t *testing.T) {
	x := startXDSServer(t, nil)
	second := rateLimitConfig("edge-b", "edge", 3)
	second.Descriptors[0].Value = "other"
	x.push(t, "1", rateLimitConfig("edge-a", "edge", 2), second)
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "HOST": "127.0.0.1", "PORT": "0",
		"REDIS_URL":                           "redis://" + miniredis.RunT(t).Addr() + "/0",
		"CONFIG_TYPE":                         "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":          x.addr,
		"CONFIG_GRPC_XDS_NODE_ID":             "gw-1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
		"MERGE_DOMAIN_CONFIG":                 "true",
	}
	addr, _ := serve(t, env) // FORCE_START_WITHOUT_INITIAL_CONFIG unset: serving means the push was applied
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	limitOf := func(value string) uint32 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if a, b := limitOf("default"), limitOf("other"); a != 2 || b != 3 {
		t.Fatalf("merged push: limits %d and %d, want edge-a's 2 and edge-b's 3", a, b)
	}
	x.push(t, "2", rateLimitConfig("edge-a", "edge", 5), rateLimitConfig("edge-c", "edge", 6))
	waitFor(t, "a NACK of the descriptor in two resources", func() bool { return x.nackCount() >= 1 })
	x.mu.Lock()
	nacks := strings.Join(x.nacks, "\n")
	x.mu.Unlock()
	if !strings.Contains(nacks, "duplicate descriptor composite key 'edge.generic_key_default'") {
		t.Errorf("NACK messages %q do not name the descriptor in two resources", nacks)
	}
	if a, b := limitOf("default"), limitOf("other"); a != 2 || b != 3 {
		t.Fatalf("after the refused push: limits %d and %d, want 2 and 3 from the rules in force", a, b)
	}
}
