package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// redisProcess starts redis-server with args on a free port until t ends
// (a Sentinel with that configuration when sentinelConf is set), and returns
// its address once it listens. "{port}" in args is that port. Without redis-server on PATH the test
// is skipped, or fails under CI=true.
func redisProcess(t *testing.T, sentinelConf string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH")
		}
		t.Skip("redis-server is not on PATH (skipped outside CI)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	var argv []string
	if sentinelConf != "" {
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		if err := os.WriteFile(conf, []byte(sentinelConf), 0o600); err != nil {
			t.Fatal(err)
		}
		argv = append(argv, conf, "--sentinel")
	}
	argv = append(argv, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	for _, a := range args {
		argv = append(argv, strings.ReplaceAll(a, "{port}", strconv.Itoa(port)))
	}
	cmd := exec.Command(bin, argv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %v not listening within 20 s", argv)
		}
	}
}

// REDIS_TYPE=SENTINEL: REDIS_URL is the master's name and the Sentinels,
// REDIS_AUTH the master's password and REDIS_SENTINEL_AUTH the
// Sentinels'; the buckets land in the master.
func TestServeRedisSentinelWithAuth(t *testing.T) {
	master := redisProcess(t, "", "--requirepass", "s3cret")
	host, port, _ := net.SplitHostPort(master)
	sentinel := redisProcess(t, fmt.Sprintf("sentinel monitor mymaster %s %s 1\nsentinel auth-pass mymaster s3cret\nrequirepass sentinel-pw\n", host, port))

	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(readmeRule), 0o600); err != nil {
		t.Fatal(err)
	}
	env := refEnv(t, root, map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster," + sentinel,
		"REDIS_AUTH": "s3cret", "REDIS_SENTINEL_AUTH": "sentinel-pw", "CACHE_KEY_PREFIX": "sentinel-test"})
	a := serveAll(t, env)
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 2 {
		t.Errorf("status %v, want OK with 2 left (3 per hour, one charged)", st)
	}
	c := redis.NewClient(&redis.Options{Addr: master, Password: "s3cret"})
	defer c.Close()
	keys, err := c.Keys(ctx, "sentinel-test:*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("keys in the master: %q %v, want the bucket's", keys, err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "sentinel-test:") {
			t.Errorf("key %q", k)
		}
	}
}

// REDIS_TLS with a client certificate (REDIS_TLS_CLIENT_CERT, _KEY) and the
// server's CA (REDIS_TLS_CACERT), as Envoy Gateway sets them, against a
// redis-server that requires client certificates.
func TestServeRedisTLS(t *testing.T) {
	c := newTestCerts(t)
	addr := redisProcess(t, "", "--port", "0", "--tls-port", "{port}", "--tls-cert-file", c.serverCert, "--tls-key-file", c.serverKey,
		"--tls-ca-cert-file", c.ca, "--tls-auth-clients", "yes")
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(readmeRule), 0o600); err != nil {
		t.Fatal(err)
	}
	env := refEnv(t, root, map[string]string{"REDIS_URL": addr, "REDIS_TLS": "true",
		"REDIS_TLS_CLIENT_CERT": c.clientCert, "REDIS_TLS_CLIENT_KEY": c.clientKey, "REDIS_TLS_CACERT": c.ca})
	a := serveAll(t, env)
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for want := uint32(2); want > 0; want-- {
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if st := res.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != want {
			t.Errorf("status %v, want OK with %d left: the bucket is in the TLS Redis", st, want)
		}
	}
}
