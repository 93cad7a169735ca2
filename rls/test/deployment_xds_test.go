package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// controlPlane is Envoy Gateway's side of the rate limit service's
// configuration: a go-control-plane state-of-the-world ADS server with a
// snapshot cache (envoyproxy/gateway internal/xds/server/ratelimit), here
// with mTLS as Envoy Gateway serves it. It counts the NACKs each stream
// sends.
type controlPlane struct {
	addr  string
	cache cache.SnapshotCache
	mu    sync.Mutex
	nacks map[int64]string
}

func startControlPlane(t *testing.T, c certs) *controlPlane {
	t.Helper()
	cp := &controlPlane{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), nacks: map[int64]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.NewServer(ctx, cp.cache, server.CallbackFuncs{
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			if d := req.GetErrorDetail(); d != nil {
				cp.mu.Lock()
				cp.nacks[id] = d.GetMessage()
				cp.mu.Unlock()
			}
			return nil
		},
	})
	kp, err := tls.LoadX509KeyPair(c.serverCert, c.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(c.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12})))
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); cancel(); <-done })
	return cp
}

// push sets the snapshot of node to cfgs.
func (cp *controlPlane) push(t *testing.T, node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (cp *controlPlane) streamsNacking() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return len(cp.nacks)
}

// rateLimitConfigFromYAML reads a configuration file into the resource a
// control plane pushes, as Envoy Gateway builds it: the same fields, the
// unit in the enum's name, what the resource cannot hold left out.
func rateLimitConfigFromYAML(t *testing.T, name string, data []byte) *rlsconfv3.RateLimitConfig {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var upper func(v any)
	upper = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "unit" {
					x[k] = strings.ToUpper(s)
				}
				upper(e)
			}
		case []any:
			for _, e := range x {
				upper(e)
			}
		}
	}
	upper(doc)
	doc["name"] = name
	j, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var pb rlsconfv3.RateLimitConfig
	// the fields the resource has no room for (share_threshold, the
	// tollgate key) are not pushed: Envoy Gateway cannot push them either
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(j, &pb); err != nil {
		t.Fatalf("%s as a RateLimitConfig: %v", name, err)
	}
	return &pb
}

// The reference and tollgate-rls started as Envoy Gateway starts the
// reference (CONFIG_TYPE=GRPC_XDS_SOTW, mTLS to the control plane,
// FORCE_START_WITHOUT_INITIAL_CONFIG) against one control plane: both are
// unhealthy until the first push, then answer every differential case
// alike; a change reaches both; a broken snapshot is NACKed by both and the
// rules in force keep answering alike.
func TestDifferentialDeploymentXDS(t *testing.T) {
	refBin := referenceBinary(t)
	tgBin := tollgateRLSBinary(t)
	c := makeCerts(t)
	cp := startControlPlane(t, c)
	tiers := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(tiers, []byte("version: 1\ndefault_tier: free\ntimeout: 5s\nfailure_policy: closed\ntiers:\n  free:\n    classes:\n      default: {capacity: 20, refill_per_second: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mapper := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(mapper, []byte("mappings: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	const node = "envoy-ratelimit"
	var svcs [2]*deployed
	for i, who := range []struct{ name, bin string }{{"envoyproxy/ratelimit", refBin}, {"tollgate-rls", tgBin}} {
		l := newListeners(t)
		env := deploymentEnv(l, "SINGLE", redistest.NewServer(t).Addr(), t.TempDir(), tiers, mapper, c, nil)
		for j, kv := range env {
			switch {
			case kv == "CONFIG_TYPE=FILE":
				env[j] = "CONFIG_TYPE=GRPC_XDS_SOTW"
			case strings.HasPrefix(kv, "CONFIG_GRPC_XDS_SERVER_URL="):
				env[j] = "CONFIG_GRPC_XDS_SERVER_URL=" + cp.addr
			case strings.HasPrefix(kv, "CONFIG_GRPC_XDS_NODE_ID="):
				env[j] = "CONFIG_GRPC_XDS_NODE_ID=" + node
			}
		}
		env = append(env, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=200ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=1s")
		svcs[i] = startDeployed(t, who.name, who.bin, env, l, c.clientCreds(t, true))
	}
	ref, tg := svcs[0], svcs[1]
	waitHealth := func(want int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for _, d := range svcs {
			for {
				code, _, err := d.health()
				if err == nil && code == want {
					break
				}
				if err := d.alive(); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: /healthcheck %d %v, want %d within a minute\n%s", d.name, code, err, want, d.out.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	// no push yet: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	waitHealth(http.StatusInternalServerError)

	cp.push(t, node, "1", rateLimitConfigFromYAML(t, "readme", rules))
	waitHealth(http.StatusOK)
	names := []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	const noShare = "share_threshold cannot be pushed: ratelimit.config.ratelimit.v3.RateLimitDescriptor has no such field"
	const noQuota = "quota_mode cannot be pushed: ratelimit.config.ratelimit.v3.RateLimitDescriptor has no such field"
	runDifferentialExcept(t, ref.rls, tg.rls, names, map[string]string{
		"share_threshold: one limit for every match":                           noShare,
		"hits_addend: two costs on one shared limit":                           noShare,
		"quota_mode: the request over only when every quota is":                noQuota,
		"quota_mode beside a rule: over when the one quota is, the rule under": noQuota,
		"quota_mode alone: over when its one quota is":                         noQuota,
	})

	// a change reaches both: a second domain
	extra := rateLimitConfigFromYAML(t, "pushed", []byte("domain: pushed\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"))
	cp.push(t, node, "2", rateLimitConfigFromYAML(t, "readme", rules), extra)
	pushed := &rlsv3.RateLimitRequest{Domain: "pushed", Descriptors: rd(0, desc("k", "v")).Descriptors}
	for _, d := range svcs {
		deadline := time.Now().Add(time.Minute)
		for ask(t, d.rls, pushed).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the pushed domain not served within a minute\n%s", d.name, d.out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// a broken snapshot (one domain twice): NACKed by both, and the rules
	// in force keep answering alike
	before := cp.streamsNacking()
	cp.push(t, node, "3", rateLimitConfigFromYAML(t, "a", rules), rateLimitConfigFromYAML(t, "b", rules))
	deadline := time.Now().Add(time.Minute)
	for cp.streamsNacking() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 services NACKed the broken snapshot within a minute", cp.streamsNacking()-before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 4 {
		req := &rlsv3.RateLimitRequest{Domain: "pushed", Descriptors: rd(0, desc("k", "after-"+strconv.Itoa(i%2))).Descriptors}
		a, b := ask(t, ref.rls, req), ask(t, tg.rls, req)
		if diffs := compare(a, b, nil, nil, names); len(diffs) > 0 {
			t.Errorf("after the broken snapshot, call %d: %s", i+1, strings.Join(diffs, "; "))
		}
		if b.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Errorf("after the broken snapshot, tollgate-rls answers %v, want the rules in force (3 a minute)", b)
		}
	}
	for _, d := range svcs {
		if code, _, err := d.health(); err != nil || code != http.StatusOK {
			t.Errorf("%s: /healthcheck after the broken snapshot: %d %v", d.name, code, err)
		}
		if err := d.alive(); err != nil {
			t.Error(err)
		}
	}
}
