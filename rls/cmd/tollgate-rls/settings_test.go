package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A setting that cannot be honoured stops the start, naming itself and
// what to use instead; a bad value names the setting.
func TestSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"USE_STATSD": "true"}, []string{"USE_STATSD=true", "USE_PROMETHEUS=true"}},
		{map[string]string{"USE_DOG_STATSD": "true"}, []string{"USE_DOG_STATSD=true", "USE_PROMETHEUS=true"}},
		{map[string]string{"BACKEND_TYPE": "memcache"}, []string{"BACKEND_TYPE=memcache", "BACKEND_TYPE=redis"}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER": "often"}, []string{"XDS_CLIENT_BACKOFF_JITTER"}},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, []string{"CONFIG_TYPE", "CONSUL"}},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "maybe"}, []string{"MERGE_DOMAIN_CONFIG", "maybe"}},
		{map[string]string{"REDIS_PERSECOND": "true"}, []string{"REDIS_PERSECOND=true", "all-or-nothing", "unset REDIS_PERSECOND"}},
		{map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "ERROR"}, []string{"REDIS_POOL_ON_EMPTY_BEHAVIOR=ERROR", "WAIT"}},
		{map[string]string{"LOG_LEVEL": "loud"}, []string{"LOG_LEVEL", "loud"}},
		{map[string]string{"LOG_FORMAT": "xml"}, []string{"LOG_FORMAT", "xml"}},
		{map[string]string{"GRPC_PORT": "80808"}, []string{"GRPC_PORT", "80808"}},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "soon"}, []string{"GRPC_MAX_CONNECTION_AGE", "soon"}},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "yes please"}, []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "yes please"}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT"}},
		{map[string]string{"PROMETHEUS_PATH": "metrics"}, []string{"PROMETHEUS_PATH", "/"}},
		{map[string]string{"REDIS_POOL_SIZE": "0"}, []string{"REDIS_POOL_SIZE"}},
	} {
		_, err := readSettings(envOf(tc.env))
		if err == nil {
			t.Errorf("%v: started", tc.env)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not say %q", tc.env, err, w)
			}
		}
	}
}

// The reference's names take the reference's defaults once one is set;
// tollgate's own names win over them; without any, tollgate's defaults
// stay.
func TestSettingsDefaultsAndPrecedence(t *testing.T) {
	s, err := readSettings(envOf(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.reference || s.grpcAddr != defaultAddr || s.metricsAddr != defaultMetricsAddr || s.httpAddr != "" || s.redisRef != nil || s.logLevel != slog.LevelInfo {
		t.Errorf("tollgate's environment: %+v", s)
	}

	s, err = readSettings(envOf(map[string]string{"REDIS_URL": "redis.example:6379"}))
	if err != nil {
		t.Fatal(err)
	}
	want := settings{reference: true, grpcNetwork: "tcp", grpcAddr: "0.0.0.0:8081", httpAddr: "0.0.0.0:8080", metricsAddr: "off", metricsPath: "/metrics",
		rulesPath: "/srv/runtime_data/current/config", logLevel: slog.LevelWarn, maxConnAge: 24 * time.Hour, maxConnAgeGrace: time.Hour,
		limitHdr: "RateLimit-Limit", remainingHdr: "RateLimit-Remaining", resetHdr: "RateLimit-Reset"}
	got := *s
	got.redisRef, got.notes = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the reference's defaults:\n got %+v\nwant %+v", got, want)
	}
	if r := *s.redisRef; r != (refRedis{socketType: "unix", typ: "single", url: "redis.example:6379", poolSize: 10, timeout: 10 * time.Second}) {
		t.Errorf("the reference's Redis defaults: %+v", r)
	}
	if len(s.notes) != 1 || !strings.HasPrefix(s.notes[0], "USE_STATSD: unset") {
		t.Errorf("notes %q, want the unset USE_STATSD only", s.notes)
	}

	s, err = readSettings(envOf(map[string]string{
		"GRPC_HOST": "127.0.0.2", "GRPC_PORT": "9000", "ADDR": "127.0.0.1:7000",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9999", "METRICS_ADDR": "127.0.0.1:7001",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RLS_CONFIG": "/etc/rls.yaml",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "rediss://r:6380", "USE_STATSD": "false", "DEBUG_PORT": "6070",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.grpcAddr != "127.0.0.1:7000" || s.metricsAddr != "127.0.0.1:7001" || s.rulesPath != "" || s.redisRef != nil {
		t.Errorf("tollgate's names must win: %+v", s)
	}
	if len(s.notes) != 2 || !strings.HasPrefix(s.notes[0], "DEBUG_PORT: accepted, without effect") || !strings.HasPrefix(s.notes[1], "REDIS_SOCKET_TYPE: not read") {
		t.Errorf("notes %q, want DEBUG_PORT's and REDIS_SOCKET_TYPE's", s.notes)
	}

	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DISABLE_STATS": "true", "USE_PROMETHEUS": "true"}, "off"},
		{map[string]string{"DISABLE_STATS": "true", "METRICS_ADDR": "127.0.0.1:7001"}, "127.0.0.1:7001"},
		{map[string]string{"USE_PROMETHEUS": "true"}, ":9090"},
		{map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": ":9999"}, "off"},
	} {
		if s, err := readSettings(envOf(tc.env)); err != nil {
			t.Errorf("%v: %v", tc.env, err)
		} else if s.metricsAddr != tc.want {
			t.Errorf("%v: metrics at %q, want %q", tc.env, s.metricsAddr, tc.want)
		}
	}

	s, err = readSettings(envOf(map[string]string{"GRPC_UDS": "/tmp/rls.sock", "PORT": "9080", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "rules", "LOG_LEVEL": "debug", "LOG_FORMAT": "json"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.grpcNetwork != "unix" || s.grpcAddr != "/tmp/rls.sock" || s.httpAddr != "0.0.0.0:9080" || s.rulesPath != "/data/ratelimit/rules" || s.logLevel != slog.LevelDebug || !s.logJSON {
		t.Errorf("GRPC_UDS, PORT, RUNTIME_*, LOG_*: %+v", s)
	}
}

// refEnv is the reference's environment for a run of the command on the
// test's loopback ports and an in-process Redis, with the rules in root.
func refEnv(t *testing.T, root string, extra map[string]string) map[string]string {
	t.Helper()
	env, _ := refEnvRedis(t, root, extra)
	return env
}

// refEnvRedis is refEnv, with its Redis.
func refEnvRedis(t *testing.T, root string, extra map[string]string) (map[string]string, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	env := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": m.Addr(), "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "LOG_LEVEL": "info",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env, m
}

func healthOf(t *testing.T, addr string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + addr + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode == http.StatusOK && string(b) != "OK" {
		t.Errorf("/healthcheck 200 with body %q, want OK", b)
	}
	return res.StatusCode
}

const readmeRule = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"

// /healthcheck, under the reference's rule: with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED and a forced start, 500 until a
// configuration is loaded, then 200 OK; 500 once shutting down, while a
// call is still in flight. A setting without effect is logged once.
func TestHealthcheck(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	env := refEnv(t, root, map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "DEBUG_PORT": "6070"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer // read only once run has returned
	go func() {
		done <- run(ctx, envOf(env), &logs, func(g, m, h string) { ready <- addrs{g, m, h} })
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("not listening after 20 s")
	}
	if a.metrics != "off" {
		t.Errorf("metrics at %q without USE_PROMETHEUS, want off", a.metrics)
	}
	if got := healthOf(t, a.http); got != http.StatusInternalServerError {
		t.Errorf("/healthcheck with no configuration: %d, want 500", got)
	}
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer hcancel()
		h, err := healthpb.NewHealthClient(cc).Check(hctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return h.GetStatus()
	}
	if got := grpcHealth(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health of ratelimit with no configuration: %v, want NOT_SERVING", got)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(readmeRule), 0o600); err != nil {
		t.Fatal(err)
	}
	// polled every second: 15 s is ample
	for deadline := time.Now().Add(15 * time.Second); healthOf(t, a.http) != http.StatusOK; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/healthcheck not 200 15 s after the configuration appeared")
		}
	}

	// looked at every second: 15 s is ample
	for deadline := time.Now().Add(15 * time.Second); grpcHealth() != healthpb.HealthCheckResponse_SERVING; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("gRPC health of ratelimit not SERVING 15 s after the configuration loaded")
		}
	}

	// a stream in flight holds the graceful stop: /healthcheck says 500
	sctx, scancel := context.WithCancel(context.Background())
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(sctx)
	if err == nil {
		err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	}
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for deadline := time.Now().Add(15 * time.Second); healthOf(t, a.http) != http.StatusInternalServerError; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/healthcheck not 500 15 s after the shutdown began")
		}
	}
	scancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return 20 s after cancel")
	}
	// a setting without effect is logged once
	if n := strings.Count(logs.String(), "DEBUG_PORT: accepted, without effect"); n != 1 {
		t.Errorf("DEBUG_PORT logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "USE_STATSD"); n != 0 {
		t.Errorf("USE_STATSD=false logged %d times, want none:\n%s", n, logs.String())
	}
}

// The reference's environment serves the reference's answers: the
// descriptor's limit override applies, the RateLimit headers come with
// LIMIT_RESPONSE_HEADERS_ENABLED.
func TestServeReferenceEnvironment(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(readmeRule), 0o600); err != nil {
		t.Fatal(err)
	}
	env := refEnv(t, root, map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left"})
	a := serveAll(t, env)
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(d *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	entries := []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}
	res := ask(&ratelimitv3.RateLimitDescriptor{Entries: entries})
	var hs []string
	for _, h := range res.GetResponseHeadersToAdd() {
		hs = append(hs, h.GetKey()+"="+h.GetValue())
	}
	if len(hs) != 3 || hs[0] != "RateLimit-Limit=3" || hs[1] != "X-Left=2" || !strings.HasPrefix(hs[2], "RateLimit-Reset=") || len(res.GetRawBody()) != 0 {
		t.Errorf("headers %q, body %q: want RateLimit-Limit=3, X-Left=2, RateLimit-Reset and no body", hs, res.GetRawBody())
	}
	// the reference's gRPC health service name
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of %q: %v %v, want SERVING", "ratelimit", h, err)
	}
	// the override: 1 per hour in place of the rule's 3
	over := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "o"}},
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 3 /* HOUR */}}
	if got := []string{ask(over).GetOverallCode().String(), ask(over).GetOverallCode().String()}; got[0] != "OK" || got[1] != "OVER_LIMIT" {
		t.Errorf("limit override of 1 per hour: %v, want OK then OVER_LIMIT", got)
	}
}

// TLS on the gRPC server: with GRPC_CLIENT_TLS_CACERT a client without a
// certificate is refused and one with a certificate of that CA served;
// with GRPC_CLIENT_TLS_SAN, only a certificate naming it.
func TestServeTLS(t *testing.T) {
	c := newTestCerts(t)
	root := t.TempDir()
	for _, tc := range []struct {
		san      string
		withCert bool
		served   bool
	}{{"", false, false}, {"", true, true}, {"envoy", true, true}, {"someone-else", true, false}} {
		env := refEnv(t, root, map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": c.serverCert, "GRPC_SERVER_TLS_KEY": c.serverKey,
			"GRPC_CLIENT_TLS_CACERT": c.ca, "GRPC_CLIENT_TLS_SAN": tc.san})
		a := serveAll(t, env)
		cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(c.creds(t, tc.withCert)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		cancel()
		_ = cc.Close()
		if served := err == nil; served != tc.served {
			t.Errorf("SAN %q, client certificate %v: served %v (%v), want %v", tc.san, tc.withCert, served, err, tc.served)
		}
	}
}

// testCerts are a CA, a server certificate for 127.0.0.1 and a client
// certificate naming "envoy", made by the test.
type testCerts struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestCerts(t *testing.T) testCerts {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	c := testCerts{ca: write("ca.crt", "CERTIFICATE", caDER)}
	c.serverCert, c.serverKey = leaf(2, "ratelimit", x509.ExtKeyUsageServerAuth)
	c.clientCert, c.clientKey = leaf(3, "envoy", x509.ExtKeyUsageClientAuth)
	return c
}

func (c testCerts) creds(t *testing.T, withCert bool) credentials.TransportCredentials {
	t.Helper()
	pool, err := certPool(c.ca)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		kp, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return credentials.NewTLS(cfg)
}

// GRPC_UDS serves on a Unix socket; CACHE_KEY_PREFIX is the prefix of every
// key written.
func TestServeUnixSocketAndKeyPrefix(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(readmeRule), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rls.sock")
	env, m := refEnvRedis(t, root, map[string]string{"GRPC_UDS": sock, "CACHE_KEY_PREFIX": "edge-a"})
	a := serveAll(t, env)
	if a.grpc != sock {
		t.Errorf("gRPC at %q, want the socket %q", a.grpc, sock)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	if got := res.GetStatuses()[0].GetLimitRemaining(); got != 2 {
		t.Errorf("limit_remaining %d, want 2 (3 per hour, one charged)", got)
	}
	keys := m.Keys()
	if len(keys) == 0 {
		t.Fatal("no key written")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "edge-a:") {
			t.Errorf("key %q without the prefix edge-a:", k)
		}
	}
}

// The gRPC server's certificate is read again when its files change: a
// client trusting only the new certificate's CA is served within a bound,
// and one trusting only the old CA is refused from then on.
func TestServeTLSCertificateReload(t *testing.T) {
	a, b := newTestCerts(t), newTestCerts(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(c testCerts) {
		for src, dst := range map[string]string{c.serverCert: cert, c.serverKey: key} {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst+".tmp", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(a)
	env := refEnv(t, t.TempDir(), map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key})
	addr := serveAll(t, env).grpc
	served := func(c testCerts) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.creds(t, false)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	if err := served(a); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}
	install(b)
	// looked at once a second at most: 15 s is ample
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := served(b)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate not served 15 s after its files changed: %v", err)
		}
	}
	if err := served(a); err == nil {
		t.Error("a client trusting only the old CA is still served")
	}
}

// A RUNTIME_* directory that does not exist yet starts with no rules, as
// the reference starts with an empty configuration there; an RLS_CONFIG
// that does not exist stops the start, naming it.
func TestServeMissingConfiguration(t *testing.T) {
	root := t.TempDir()
	a := serveAll(t, refEnv(t, root, nil))
	if got := healthOf(t, a.http); got != http.StatusOK {
		t.Errorf("/healthcheck without HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: %d, want 200", got)
	}
	cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("no configuration: %v %v, want OK without a limit", res, err)
	}

	env := refEnv(t, root, map[string]string{"RLS_CONFIG": filepath.Join(root, "missing.yaml")})
	var logs bytes.Buffer
	err = run(context.Background(), envOf(env), &logs, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "RLS_CONFIG: ") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing RLS_CONFIG: %v, want an error naming it", err)
	}
}

// LOCAL_CACHE_SIZE_IN_BYTES above 0 is the deny cache: a descriptor denied
// once is denied again without the store (here, with the store gone);
// at 0, the failure policy answers instead.
func TestServeLocalCacheIsTheDenyCache(t *testing.T) {
	for _, tc := range []struct {
		size string
		want rlsv3.RateLimitResponse_Code
	}{{"1048576", rlsv3.RateLimitResponse_OVER_LIMIT}, {"0", rlsv3.RateLimitResponse_OK}} {
		root := t.TempDir()
		dir := filepath.Join(root, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// a check timeout a loaded machine cannot miss: a cached denial
		// lasts less than one, and the third request must come within it
		tiers := filepath.Join(root, "tollgate.yaml")
		if err := os.WriteFile(tiers, []byte("version: 1\ndefault_tier: free\ntimeout: 10s\ntiers:\n  free:\n    classes:\n      default: {capacity: 20, refill_per_second: 2}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env, m := refEnvRedis(t, root, map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": tc.size, "TOLLGATE_CONFIG": tiers})
		a := serveAll(t, env)
		cc, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var codes []rlsv3.RateLimitResponse_Code
		for i := range 3 {
			if i == 2 {
				m.Close() // the store is gone
			}
			res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, res.GetOverallCode())
		}
		cancel()
		_ = cc.Close()
		if codes[0] != rlsv3.RateLimitResponse_OK || codes[1] != rlsv3.RateLimitResponse_OVER_LIMIT || codes[2] != tc.want {
			t.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%s: %v, want OK, OVER_LIMIT, then with the store gone %v", tc.size, codes, tc.want)
		}
	}
}
