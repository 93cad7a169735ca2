package e2e_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/examples/internal/grpctest"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// attackFor is how long each attack runs while the victim is checked.
const attackFor = 1500 * time.Millisecond

// bucketKey is the Redis key of tenant's class bucket in the services'
// Redis (the tests' key prefix, testPrefix).
func bucketKey(t *testing.T, tenant, class string) string {
	t.Helper()
	ks, err := keys.New(testPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ks.Bucket(tenant, class)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// poison stores a value of the wrong type at tenant's bucket key in the
// services' Redis: every check of that tenant's default class then gets
// WRONGTYPE from the script.
func poison(t *testing.T, tenant string) {
	t.Helper()
	key := bucketKey(t, tenant, quota.DefaultClass)
	rc := redistest.Client(t)
	if err := rc.LPush(t.Context(), key, "poison").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Del(context.Background(), key) })
}

// patientConfig writes the examples' tier file with a 2s check timeout
// instead of 100ms. Seven services and their attackers share the machine's
// cores; with 100ms a victim's own check can time out and fail open, which
// is the failure policy at work, not the attack. The breaker still counted
// gone callers and poisoned keys before the store boundary told them apart,
// whatever the timeout, so the test keeps its teeth.
func patientConfig(t *testing.T) string {
	t.Helper()
	cfg := bytes.Replace(examples.DefaultConfig, []byte("\ntimeout: 100ms\n"), []byte("\ntimeout: 2s\n"), 1)
	if bytes.Equal(cfg, examples.DefaultConfig) {
		t.Fatal("tollgate.yaml has no 'timeout: 100ms' line to lengthen")
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// during runs attack from workers goroutines until stop is closed.
func during(workers int, attack func(stop <-chan struct{})) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attack(done)
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// The examples, as real processes, under callers who cannot switch the
// limiter off: a tenant whose export bucket is drained stays denied while
// another caller owns a poisoned (WRONGTYPE) key and sends requests it
// abandons mid-check (HTTP: the connection closed right after the request;
// gRPC: a 50µs grpc-timeout, or a call cancelled at once). Before the store
// boundary told these apart, the circuit breaker opened within a few such
// requests and the fail-open examples then admitted everyone.
func TestAttackersCannotSwitchTheLimiterOff(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	binaries(t)
	for _, name := range append(append([]string(nil), httpExamples...), "grpc") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr, maddr := freeAddr(t), freeAddr(t)
			p := start(t, name, "ADDR="+addr, "METRICS_ADDR="+maddr, "REDIS_URL="+redisURL, "TOLLGATE_JWT_SECRET="+secret,
				"DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db", "TOLLGATE_CONFIG="+patientConfig(t))
			victim, attacker := tenantID(t, name+"-victim"), tenantID(t, name+"-attacker")
			victimAuth := "Bearer " + mint(t, secret, victim, "free")
			attackerAuth := "Bearer " + mint(t, secret, attacker, "free")
			poison(t, attacker)
			if name == "grpc" {
				waitHealthy(t, p, "http://"+maddr+app.PathHealth)
				attackGRPC(t, addr, victimAuth, attackerAuth)
			} else {
				waitHealthy(t, p, "http://"+addr+app.PathHealth)
				attackHTTP(t, "http://"+addr, addr, victimAuth, attackerAuth)
			}
			stop(t, p)
		})
	}
}

func attackHTTP(t *testing.T, base, addr, victimAuth, attackerAuth string) {
	c := newClient(t)
	for range 2 { // drain the victim's export bucket: 10 tokens, 5 a call
		if r := c.do(t, http.MethodPost, base+app.PathExport, victimAuth); r.status != http.StatusOK {
			t.Fatalf("export: %d %s", r.status, r.body)
		}
	}
	raw := "GET " + app.PathProfile + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + attackerAuth + "\r\n\r\n"
	end := during(4, func(stop <-chan struct{}) {
		ac := &http.Client{Timeout: 5 * time.Second}
		for i := 0; !stopped(stop); i++ {
			if i%2 == 0 {
				// the poisoned tenant's own requests
				req, _ := http.NewRequest(http.MethodGet, base+app.PathProfile, nil)
				req.Header.Set("Authorization", attackerAuth)
				if resp, err := ac.Do(req); err == nil {
					_ = resp.Body.Close()
				}
				continue
			}
			// a caller that leaves as soon as its request is sent
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				continue
			}
			_, _ = conn.Write([]byte(raw))
			_ = conn.Close()
		}
		ac.CloseIdleConnections()
	})
	defer end()
	deadline := time.Now().Add(attackFor)
	for n := 0; time.Now().Before(deadline); n++ {
		r := c.do(t, http.MethodPost, base+app.PathExport, victimAuth)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("victim's export #%d during the attack: %d %s; want 429: the limiter was switched off", n, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	end()
	if r := c.do(t, http.MethodPost, base+app.PathExport, victimAuth); r.status != http.StatusTooManyRequests {
		t.Fatalf("victim's export after the attack: %d %s", r.status, r.body)
	}
}

func attackGRPC(t *testing.T, addr, victimAuth, attackerAuth string) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	c := demopb.NewDemoClient(cc)
	ctx := t.Context()
	for range 2 {
		if n, _, _, err := grpctest.Export(grpctest.WithAuth(ctx, victimAuth), c); err != nil || n != 2 {
			t.Fatalf("export: %d chunks, %v", n, err)
		}
	}
	end := during(4, func(stop <-chan struct{}) {
		for i := 0; !stopped(stop); i++ {
			var cctx context.Context
			var cancel context.CancelFunc
			switch i % 3 {
			case 0: // the poisoned tenant's own calls
				cctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			case 1: // grpc-timeout: 50u
				cctx, cancel = context.WithTimeout(ctx, 50*time.Microsecond)
			default: // cancelled as soon as it is sent
				cctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(100*time.Microsecond, cancel)
			}
			_, _ = c.GetProfile(grpctest.WithAuth(cctx, attackerAuth), &demopb.GetProfileRequest{}, grpc.WaitForReady(false))
			cancel()
		}
	})
	defer end()
	deadline := time.Now().Add(attackFor)
	for n := 0; time.Now().Before(deadline); n++ {
		if _, _, _, err := grpctest.Export(grpctest.WithAuth(ctx, victimAuth), c); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("victim's export #%d during the attack: %v; want ResourceExhausted: the limiter was switched off", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	end()
	if _, _, _, err := grpctest.Export(grpctest.WithAuth(ctx, victimAuth), c); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("victim's export after the attack: %v", err)
	}
}
