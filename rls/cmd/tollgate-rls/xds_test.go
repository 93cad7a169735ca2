package main

import (
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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/alicebob/miniredis/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/credentials/insecure"
)

// xdsServer is a go-control-plane state-of-the-world ADS server, as Envoy
// Gateway's control plane serves the rate limit service's configuration
// (internal/xds/server/ratelimit in envoyproxy/gateway), recording the
// NACKs it receives.
type xdsServer struct {
	addr  string
	cache cache.SnapshotCache
	mu    sync.Mutex
	nacks []string
	nodes []string
}

func startXDSServer(t *testing.T, creds credentials.TransportCredentials) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.NewServer(ctx, x.cache, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.nodes = append(x.nodes, req.GetNode().GetId()+" "+req.GetNode().GetMetadata().GetFields()["zone"].GetStringValue())
			if d := req.GetErrorDetail(); d != nil {
				x.nacks = append(x.nacks, d.GetMessage())
			}
			return nil
		},
	})
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	g := grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); cancel(); <-done })
	return x
}

func (x *xdsServer) push(t *testing.T, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), "gw-1", snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) nackCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.nacks)
}

func rateLimitConfig(name, domain string, perMinute uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "generic_key", Value: "default",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: perMinute},
	}}}
}

// applied collects the configurations the watch applies.
type applied struct {
	ch     chan *rls.Config
	refuse func(*rls.Config) error
}

func (a *applied) apply(c *rls.Config) error {
	if a.refuse != nil {
		if err := a.refuse(c); err != nil {
			return err
		}
	}
	a.ch <- c
	return nil
}

func (a *applied) next(t *testing.T) *rls.Config {
	t.Helper()
	select {
	case c := <-a.ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no configuration applied within 20 s")
		return nil
	}
}

func testXDSSettings(t *testing.T, env map[string]string) xdsSettings {
	t.Helper()
	s, err := xdsSettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestXDSAppliesPushedSnapshotsAndRefusesBrokenOnes(t *testing.T) {
	x := startXDSServer(t, nil)
	a := &applied{ch: make(chan *rls.Config, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	done := watchXDS(ctx, testXDSSettings(t, map[string]string{
		"CONFIG_GRPC_XDS_SERVER_URL":          x.addr,
		"CONFIG_GRPC_XDS_NODE_ID":             "gw-1",
		"CONFIG_GRPC_XDS_NODE_METADATA":       "zone=eu-1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
	}), a.apply, discardLog())
	defer func() { cancel(); <-done }()

	x.push(t, "1", rateLimitConfig("edge", "edge", 10))
	if got := domainsOf(a.next(t)); got != "edge" {
		t.Fatalf("first snapshot: domains %q", got)
	}
	// a change reaches the service
	x.push(t, "2", rateLimitConfig("edge", "edge", 10), rateLimitConfig("api", "api", 5))
	if got := domainsOf(a.next(t)); got != "api,edge" {
		t.Fatalf("second snapshot: domains %q", got)
	}
	// a broken snapshot (one domain twice; then a limit with no unit) is
	// NACKed and nothing is applied
	x.push(t, "3", rateLimitConfig("a", "edge", 1), rateLimitConfig("b", "edge", 2))
	waitFor(t, "a NACK of the duplicate domain", func() bool { return x.nackCount() >= 1 })
	bad := rateLimitConfig("edge", "edge", 3)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	x.push(t, "4", bad)
	waitFor(t, "a NACK of the unknown unit", func() bool { return x.nackCount() >= 2 })
	select {
	case c := <-a.ch:
		t.Fatalf("a broken snapshot was applied: domains %q", domainsOf(c))
	default:
	}
	x.mu.Lock()
	nacks, nodes := strings.Join(x.nacks, "\n"), x.nodes
	x.mu.Unlock()
	if !strings.Contains(nacks, "duplicate domain") {
		t.Errorf("NACK messages %q do not name the duplicate domain", nacks)
	}
	if nodes[0] != "gw-1 eu-1" {
		t.Errorf("the server saw node %q, want id gw-1 with metadata zone=eu-1", nodes[0])
	}
	// and a good one after it is applied again
	x.push(t, "5", rateLimitConfig("edge", "edge", 7))
	if got := domainsOf(a.next(t)); got != "edge" {
		t.Fatalf("snapshot after the broken ones: domains %q", got)
	}
}

// TestXDSRefusedByApplyIsNACKed: a configuration the service cannot serve
// (apply's error) is NACKed as a malformed one is.
func TestXDSRefusedByApplyIsNACKed(t *testing.T) {
	x := startXDSServer(t, nil)
	a := &applied{ch: make(chan *rls.Config, 1), refuse: func(*rls.Config) error { return io.ErrUnexpectedEOF }}
	ctx, cancel := context.WithCancel(context.Background())
	done := watchXDS(ctx, testXDSSettings(t, map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": x.addr, "CONFIG_GRPC_XDS_NODE_ID": "gw-1"}), a.apply, discardLog())
	defer func() { cancel(); <-done }()
	x.push(t, "1", rateLimitConfig("edge", "edge", 10))
	waitFor(t, "a NACK", func() bool { return x.nackCount() >= 1 })
}

// TestXDSReconnects: the server goes away and comes back on the same
// address; the client reconnects after its backoff and takes the
// configuration it serves.
func TestXDSReconnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := &applied{ch: make(chan *rls.Config, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := watchXDS(ctx, testXDSSettings(t, map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": "gw-1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "100ms"}), a.apply, discardLog())
	defer func() { cancel(); <-done }()
	time.Sleep(150 * time.Millisecond) // a few failed attempts, nothing listening
	x := &xdsServer{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(sctx, x.cache, nil))
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address was taken meanwhile: %v", err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ln) }()
	defer func() { g.Stop(); <-served }()
	x.push(t, "1", rateLimitConfig("edge", "edge", 10))
	if got := domainsOf(a.next(t)); got != "edge" {
		t.Fatalf("domains %q", got)
	}
}

// TestXDSMutualTLS: with the server requiring client certificates, a
// client without one gets nothing; with one (Envoy Gateway's settings), it
// is served.
func TestXDSMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	serverCert := ca.issue(t, "xds.example", false)
	x := startXDSServer(t, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS12,
	}))
	x.push(t, "1", rateLimitConfig("edge", "edge", 10))
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.cert.Raw)
	env := map[string]string{
		"CONFIG_GRPC_XDS_SERVER_URL":          x.addr,
		"CONFIG_GRPC_XDS_NODE_ID":             "gw-1",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":      "true",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":   caFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":      "xds.example",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
	}

	// without a client certificate: refused, nothing applied
	a := &applied{ch: make(chan *rls.Config, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := watchXDS(ctx, testXDSSettings(t, env), a.apply, discardLog())
	select {
	case <-a.ch:
		t.Fatal("a client without a certificate was served")
	case <-time.After(time.Second):
	}
	cancel()
	<-done

	client := ca.issue(t, "tollgate-rls", true)
	env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"] = writePEM(t, dir, "client.pem", "CERTIFICATE", client.Certificate[0])
	key, err := x509.MarshalPKCS8PrivateKey(client.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = writePEM(t, dir, "client-key.pem", "PRIVATE KEY", key)
	ctx, cancel = context.WithCancel(context.Background())
	done = watchXDS(ctx, testXDSSettings(t, env), a.apply, discardLog())
	defer func() { cancel(); <-done }()
	if got := domainsOf(a.next(t)); got != "edge" {
		t.Fatalf("domains %q", got)
	}
}

func TestXDSSettingsRefuseBadValues(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"headers":   {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "novalue"},
		"backoff":   {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "soon"},
		"factor":    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"},
		"tls":       {"CONFIG_GRPC_XDS_SERVER_USE_TLS": "maybe"},
		"cert only": {"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c.pem"},
		"ca":        {"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/nonexistent/ca.pem"},
		"msg size":  {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "-1"},
	} {
		if _, err := xdsSettingsFromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("%s: %v accepted", name, env)
		}
	}
	s := testXDSSettings(t, nil)
	if s.serverURL != "localhost:18000" || s.node.GetId() != "default" || s.backoffMin != 10*time.Second || s.backoffMax != time.Minute || s.tls != nil {
		t.Errorf("defaults: %+v, want the reference's", s)
	}
}

func domainsOf(c *rls.Config) string { return strings.Join(c.Domains(), ",") }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

var serial = big.NewInt(1)

func (ca *testCA) issue(t *testing.T, name string, client bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial = new(big.Int).Add(serial, big.NewInt(1))
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeXDS: tollgate-rls started as Envoy Gateway starts the reference
// (CONFIG_TYPE=GRPC_XDS_SOTW) answers by the rules the control plane
// pushes; a change reaches it, a broken push is NACKed and the rules in
// force keep answering.
func TestServeXDS(t *testing.T) {
	x := startXDSServer(t, nil)
	x.push(t, "1", rateLimitConfig("edge", "edge", 2))
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "HOST": "127.0.0.1", "PORT": "0",
		"REDIS_URL":                           "redis://" + miniredis.RunT(t).Addr() + "/0",
		"CONFIG_TYPE":                         "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":          x.addr,
		"CONFIG_GRPC_XDS_NODE_ID":             "gw-1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
	}
	addr, _ := serve(t, env) // FORCE_START_WITHOUT_INITIAL_CONFIG unset: serving means the push arrived
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ask := func(domain string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "default"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	limitOf := func(domain string) uint32 {
		return ask(domain).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask("edge").GetOverallCode(); got != want {
			t.Fatalf("call %d under 2 a minute: %v, want %v", i+1, got, want)
		}
	}
	// a change: a second domain
	x.push(t, "2", rateLimitConfig("edge", "edge", 2), rateLimitConfig("api", "api", 3))
	waitFor(t, "the pushed domain api", func() bool { return limitOf("api") == 3 })
	// a broken push is NACKed; the rules in force keep answering
	x.push(t, "3", rateLimitConfig("a", "edge", 1), rateLimitConfig("b", "edge", 1))
	waitFor(t, "a NACK", func() bool { return x.nackCount() >= 1 })
	if got := limitOf("api"); got != 3 {
		t.Fatalf("after the broken push, api's limit is %d, want 3 from the rules in force", got)
	}
	if got := limitOf("edge"); got != 2 {
		t.Fatalf("after the broken push, edge's limit is %d, want 2 from the rules in force", got)
	}
}

// TestServeXDSWaitsForFirstPush: without FORCE_START_WITHOUT_INITIAL_CONFIG
// the service does not start before the control plane has pushed a
// configuration (as the reference); with it, it starts at once.
func TestServeXDSWaitsForFirstPush(t *testing.T) {
	x := startXDSServer(t, nil) // pushes nothing
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "HOST": "127.0.0.1", "PORT": "0",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": x.addr, "CONFIG_GRPC_XDS_NODE_ID": "gw-1",
		"REDIS_URL": "redis://" + miniredis.RunT(t).Addr() + "/0",
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	listening := make(chan struct{}, 1)
	err := run(ctx, func(k string) string { return env[k] }, io.Discard, func(string, string, string) { listening <- struct{}{} })
	if err == nil || !strings.Contains(err.Error(), "first configuration") || len(listening) != 0 {
		t.Fatalf("run without a push: %v (listening: %d)", err, len(listening))
	}
	env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true"
	serve(t, env)

	env["RLS_CONFIG"] = "../../testdata/readme.yaml"
	if err := run(context.Background(), func(k string) string { return env[k] }, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "unset one") {
		t.Errorf("RLS_CONFIG beside xDS: %v", err)
	}
}
