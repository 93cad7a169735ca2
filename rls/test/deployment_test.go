package test

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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// tollgateRLSBinary builds the tollgate-rls command into a directory of t.
func tollgateRLSBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tollgate-rls")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/tollgate-go/tollgate/rls/cmd/tollgate-rls")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build tollgate-rls: %v\n%s", err, b)
	}
	return out
}

// certs are the files of a CA, a server certificate for 127.0.0.1 and a
// client certificate, all made by the test.
type certs struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func makeCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		k := key()
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
	c := certs{ca: write("ca.crt", "CERTIFICATE", caDER)}
	c.serverCert, c.serverKey = leaf(2, "ratelimit", x509.ExtKeyUsageServerAuth)
	c.clientCert, c.clientKey = leaf(3, "envoy", x509.ExtKeyUsageClientAuth)
	return c
}

// clientCreds are a gRPC client's credentials trusting c's CA, presenting
// c's client certificate when withCert.
func (c certs) clientCreds(t *testing.T, withCert bool) credentials.TransportCredentials {
	t.Helper()
	pemCA, err := os.ReadFile(c.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
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

// listeners are one process's ports.
type listeners struct{ grpc, http, debug, prom int }

func newListeners(t *testing.T) listeners {
	return listeners{freePort(t), freePort(t), freePort(t), freePort(t)}
}

// deploymentEnv is the one environment both services start with: every
// variable the reference's README sets for a deployment and Envoy
// Gateway's rate limit Deployment sets (internal/infrastructure/kubernetes/
// ratelimit/resource.go), with CONFIG_TYPE=FILE in place of its xDS and the
// test's certificates, ports and Redis. Only the ports and the Redis
// address differ between the two processes. TOLLGATE_CONFIG (ignored by
// the reference) gives tollgate's checks a store timeout a loaded machine
// cannot miss, failing closed, so no answer is a silent fail-open.
func deploymentEnv(l listeners, redisType, redisAddr, root, tierFile, mapper string, c certs, headerNames []string) []string {
	env := []string{
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(l.grpc),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(l.http),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(l.debug),
		"GRPC_MAX_CONNECTION_AGE=24h", "GRPC_MAX_CONNECTION_AGE_GRACE=1h",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + c.serverCert, "GRPC_SERVER_TLS_KEY=" + c.serverKey,
		"GRPC_CLIENT_TLS_CACERT=" + c.ca, "GRPC_SERVER_TLS_CA_CERT=" + c.ca,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=" + redisType, "REDIS_URL=" + redisAddr, "REDIS_POOL_SIZE=10", "REDIS_TIMEOUT=10s",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"CONFIG_TYPE=FILE", "FORCE_START_WITHOUT_INITIAL_CONFIG=true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"MERGE_DOMAIN_CONFIG=false", "SHADOW_MODE=false",
		"LOG_LEVEL=warn", "LOG_FORMAT=json",
		"USE_STATSD=false", "STATSD_PORT=9125",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(l.prom), "PROMETHEUS_PATH=/metrics",
		"PROMETHEUS_MAPPER_YAML=" + mapper,
		"TRACING_ENABLED=false", "TRACING_SERVICE_NAME=envoy-ratelimit", "TRACING_SERVICE_NAMESPACE=test",
		"TRACING_SERVICE_INSTANCE_ID=pod-0", "TRACING_SAMPLING_RATE=1.0", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
		// Envoy Gateway's xDS settings, inert with CONFIG_TYPE=FILE in both
		"CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + c.clientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + c.clientKey, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + c.ca,
		"NEAR_LIMIT_RATIO=0.8", "LOCAL_CACHE_SIZE_IN_BYTES=0", "BACKEND_TYPE=redis",
		"EXPIRATION_JITTER_MAX_SECONDS=300", "CACHE_KEY_PREFIX=deploy-test",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"TOLLGATE_CONFIG=" + tierFile,
	}
	if headerNames != nil {
		env = append(env, "LIMIT_LIMIT_HEADER="+headerNames[0], "LIMIT_REMAINING_HEADER="+headerNames[1], "LIMIT_RESET_HEADER="+headerNames[2])
	}
	return env
}

// deployed is one service started from a binary with an environment.
type deployed struct {
	name  string
	rls   rlsv3.RateLimitServiceClient
	http  string // HOST:PORT
	prom  string // PROMETHEUS_ADDR
	grpc  string
	out   *testkit.LogBuffer
	alive func() error // nil while running, else how it exited
}

// startDeployed runs bin with env until t ends, and returns it once its
// /healthcheck answers (whatever its status); a minute at most.
func startDeployed(t *testing.T, name, bin string, env []string, l listeners, creds credentials.TransportCredentials) *deployed {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	d := &deployed{name: name, http: "127.0.0.1:" + strconv.Itoa(l.http), prom: "127.0.0.1:" + strconv.Itoa(l.prom), grpc: "127.0.0.1:" + strconv.Itoa(l.grpc), out: &testkit.LogBuffer{}}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	d.alive = func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("%s exited: %v\n%s", name, err, d.out.String())
		default:
			return nil
		}
	}
	cc, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	d.rls = rlsv3.NewRateLimitServiceClient(cc)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, err := d.health(); err == nil {
			return d
		}
		if err := d.alive(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthcheck not answering within a minute\n%s", name, d.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// get returns the status and body of GET url.
func get(url string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b), err
}

// post returns the status and body of POST url with body.
func post(url string, body []byte) (int, string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	res, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b), err
}

func (d *deployed) health() (int, string, error) { return get("http://" + d.http + "/healthcheck") }

// The reference and tollgate-rls started with one environment (the
// reference's deployment settings, Envoy Gateway's included, mTLS on) and
// one configuration: /healthcheck answers alike before and after the
// configuration is loaded, a client without a certificate is refused by
// both, Prometheus is served on both, and every differential case answers
// alike (over gRPC, and a sequence over HTTP /json), the RateLimit headers
// included, with the default and with custom
// header names, on one Redis server each and on a Cluster each.
func TestDifferentialDeployment(t *testing.T) {
	refBin := referenceBinary(t)
	tgBin := tollgateRLSBinary(t)
	if out, err := exec.Command(tgBin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "tollgate-rls ") || !strings.Contains(string(out), runtime.Version()) {
		t.Errorf("tollgate-rls --version: %q %v, want tollgate-rls <version> ... %s", out, err, runtime.Version())
	}
	c := makeCerts(t)
	tiers := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(tiers, []byte("version: 1\ndefault_tier: free\ntimeout: 5s\nfailure_policy: closed\ntiers:\n  free:\n    classes:\n      default: {capacity: 20, refill_per_second: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mapper := filepath.Join(t.TempDir(), "conf.yaml") // statsd_exporter's mapping, as Envoy Gateway mounts it
	if err := os.WriteFile(mapper, []byte("mappings: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		headers []string // nil: the reference's defaults
		cluster bool     // REDIS_TYPE=CLUSTER, each its own Cluster
	}{
		{"default header names", nil, false},
		{"custom header names", []string{"X-Limit", "X-Left", "X-Reset-After"}, false},
		{"cluster", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var svcs [2]*deployed
			var dirs [2]string
			for i, who := range []struct{ name, bin string }{{"envoyproxy/ratelimit", refBin}, {"tollgate-rls", tgBin}} {
				root := t.TempDir()
				dirs[i] = filepath.Join(root, "ratelimit", "config")
				if err := os.MkdirAll(dirs[i], 0o755); err != nil {
					t.Fatal(err)
				}
				l := newListeners(t)
				redisType, redisAddr := "SINGLE", ""
				if tc.cluster {
					redisType, redisAddr = "CLUSTER", strings.Join(redistest.NewCluster(t, 3, 0).Addrs(), ",")
				} else {
					redisAddr = redistest.NewServer(t).Addr()
				}
				env := deploymentEnv(l, redisType, redisAddr, root, tiers, mapper, c, tc.headers)
				svcs[i] = startDeployed(t, who.name, who.bin, env, l, c.clientCreds(t, true))
			}
			ref, tg := svcs[0], svcs[1]

			// no configuration yet: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
			for _, d := range svcs {
				if code, body, err := d.health(); err != nil || code != http.StatusInternalServerError {
					t.Errorf("%s: /healthcheck with no configuration loaded: %d %q %v, want 500", d.name, code, body, err)
				}
			}
			for _, dir := range dirs {
				if err := os.WriteFile(filepath.Join(dir, "readme.yaml"), rules, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// both load it: a minute at most (tollgate polls every second)
			deadline := time.Now().Add(time.Minute)
			for _, d := range svcs {
				for {
					code, body, err := d.health()
					if err == nil && code == http.StatusOK && body == "OK" {
						break
					}
					if err := d.alive(); err != nil {
						t.Fatal(err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: /healthcheck %d %q %v a minute after the configuration was written, want 200 OK\n%s", d.name, code, body, err, d.out.String())
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			for _, d := range svcs {
				if code, _, err := get("http://" + d.prom + "/metrics"); err != nil || code != http.StatusOK {
					t.Errorf("%s: GET PROMETHEUS_ADDR/metrics: %d %v, want 200", d.name, code, err)
				}
				// mTLS: a client without a certificate is refused
				cc, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(c.clientCreds(t, false)))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, rd(0, desc("ldap", "x")))
				cancel()
				_ = cc.Close()
				if err == nil {
					t.Errorf("%s: a client without a certificate was served", d.name)
				}
				if _, err := d.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "readme", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("ldap", "x")}}); err != nil {
					t.Errorf("%s: a client with a certificate: %v", d.name, err)
				}
			}
			names := tc.headers
			if names == nil {
				names = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
			}
			// both send the three headers, by these names
			for _, d := range svcs {
				res := ask(t, d.rls, rd(0, desc("remote_address", "60.0.0.1")))
				var got []string
				for _, h := range res.GetResponseHeadersToAdd() {
					got = append(got, h.GetKey()+": "+h.GetValue())
				}
				if len(got) != 3 || !strings.HasPrefix(got[0], names[0]+": 10") || !strings.HasPrefix(got[1], names[1]+": 9") || !strings.HasPrefix(got[2], names[2]+": ") {
					t.Errorf("%s: headers %q, want %s: 10, %s: 9, %s", d.name, got, names[0], names[1], names[2])
				}
			}
			runDifferentialHeaders(t, ref.rls, tg.rls, names)

			// the same over HTTP, the reference's /json on HOST:PORT: 10
			// an hour, then 429; a body that is not a request is 400
			body, err := protojson.Marshal(rd(0, desc("remote_address", "61.0.0.1")))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 11 {
				var codes [2]int
				var answers [2]*rlsv3.RateLimitResponse
				for j, d := range svcs {
					code, out, err := post("http://"+d.http+"/json", body)
					if err != nil {
						t.Fatalf("%s: POST /json: %v", d.name, err)
					}
					answers[j] = &rlsv3.RateLimitResponse{}
					if err := protojson.Unmarshal([]byte(out), answers[j]); err != nil {
						t.Fatalf("%s: POST /json %d: %v: %s", d.name, code, err, out)
					}
					codes[j] = code
				}
				if want := map[bool]int{true: http.StatusTooManyRequests, false: http.StatusOK}[i == 10]; codes[0] != want || codes[1] != want {
					t.Errorf("POST /json %d: reference %d, tollgate %d, want %d", i+1, codes[0], codes[1], want)
				}
				if diffs := compare(answers[0], answers[1], nil, nil, names); len(diffs) > 0 {
					t.Errorf("POST /json %d: %s", i+1, strings.Join(diffs, "; "))
				}
			}
			for _, d := range svcs {
				if code, _, err := post("http://"+d.http+"/json", []byte("{not json")); err != nil || code != http.StatusBadRequest {
					t.Errorf("%s: POST /json with a bad body: %d %v, want 400", d.name, code, err)
				}
			}
			for _, d := range svcs {
				if err := d.alive(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
