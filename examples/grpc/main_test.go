package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/examples/internal/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) { apptest.Main(m) }

// dial serves the example over an in-memory connection.
func dial(t *testing.T, a *app.App) *grpc.ClientConn {
	t.Helper()
	srv, err := NewServer(a)
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestService(t *testing.T) {
	a := apptest.New(t)
	c := demopb.NewDemoClient(dial(t, a))
	ctx := t.Context()

	t.Run("health needs no token and is never limited", func(t *testing.T) {
		h := healthpb.NewHealthClient(dial(t, a))
		for range 30 {
			r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health: %v %v", r, err)
			}
		}
	})

	t.Run("no or bad token is Unauthenticated", func(t *testing.T) {
		for _, bad := range apptest.BadTokens(t) {
			var hdr metadata.MD
			_, err := c.GetProfile(grpctest.WithAuth(ctx, bad.Authorization), &demopb.GetProfileRequest{}, grpc.Header(&hdr))
			if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != bad.Detail {
				t.Errorf("%s: GetProfile: %v, want Unauthenticated saying %q", bad.Name, err, bad.Detail)
			}
			if len(hdr.Get("x-ratelimit-limit")) != 0 {
				t.Errorf("%s: the limiter ran before authentication", bad.Name)
			}
			if _, _, _, err := grpctest.Export(grpctest.WithAuth(ctx, bad.Authorization), c); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: ExportReport: %v, want Unauthenticated", bad.Name, err)
			}
		}
	})

	t.Run("profile carries the rate-limit metadata", func(t *testing.T) {
		tenant := apptest.Tenant(t)
		var hdr metadata.MD
		p, err := c.GetProfile(grpctest.WithAuth(ctx, "Bearer "+apptest.Token(t, tenant, "free")), &demopb.GetProfileRequest{}, grpc.Header(&hdr))
		if err != nil || p.GetTenant() != tenant || p.GetTier() != "free" {
			t.Fatalf("GetProfile = %v, %v", p, err)
		}
		if got := hdr.Get("x-ratelimit-limit"); len(got) != 1 || got[0] != "20" {
			t.Errorf("x-ratelimit-limit = %q", got)
		}
		if got := hdr.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"default";q=20;w=10` {
			t.Errorf("ratelimit-policy = %q", got)
		}
	})

	t.Run("unary calls are denied past the burst", func(t *testing.T) {
		actx := grpctest.WithAuth(ctx, "Bearer "+apptest.Token(t, apptest.Tenant(t), "free"))
		start := time.Now()
		ok, denied := 0, 0
		for range 30 {
			_, err := c.GetProfile(actx, &demopb.GetProfileRequest{})
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.ResourceExhausted:
				denied++
			default:
				t.Fatalf("GetProfile: %v", err)
			}
		}
		if bound := 20 + 2*time.Since(start).Seconds(); float64(ok) > bound || denied == 0 {
			t.Errorf("admitted %d, denied %d: want admitted <= %.1f and some denied", ok, denied, bound)
		}
	})

	t.Run("free export stream is denied after two with ResourceExhausted", func(t *testing.T) {
		actx := grpctest.WithAuth(ctx, "Bearer "+apptest.Token(t, apptest.Tenant(t), "free"))
		for i := range 2 {
			if n, _, _, err := grpctest.Export(actx, c); err != nil || n != 2 {
				t.Fatalf("export #%d: %d chunks, %v", i+1, n, err)
			}
		}
		n, _, tr, err := grpctest.Export(actx, c)
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || n != 0 {
			t.Fatalf("export #3: %d chunks, %v; want ResourceExhausted before any chunk", n, err)
		}
		retry := grpctest.RetryInfo(st)
		if retry == nil || retry.GetRetryDelay().AsDuration() < 45*time.Second || retry.GetRetryDelay().AsDuration() > 50*time.Second {
			t.Errorf("RetryInfo = %v, want 45..50 s", retry)
		}
		if ra := tr.Get("retry-after"); len(ra) != 1 {
			t.Errorf("retry-after trailer = %q", ra)
		} else if s, _ := strconv.Atoi(ra[0]); s < 45 || s > 50 {
			t.Errorf("retry-after trailer = %q, want 45..50", ra)
		}
	})

	t.Run("reports allows two in flight per free tenant", func(t *testing.T) {
		// six at once, each about 200 ms: two run, the others find both
		// slots taken (however the machine schedules them, some overlap)
		actx := grpctest.WithAuth(ctx, "Bearer "+apptest.Token(t, apptest.Tenant(t), "free"))
		type answer struct {
			list *demopb.ReportList
			hdr  metadata.MD
			err  error
		}
		as := make([]answer, 6)
		var wg sync.WaitGroup
		for i := range as {
			wg.Add(1)
			go func() {
				defer wg.Done()
				as[i].list, as[i].err = c.ListReports(actx, &demopb.ListReportsRequest{}, grpc.Header(&as[i].hdr))
			}()
		}
		wg.Wait()
		ok, denied := 0, 0
		for _, a := range as {
			st := status.Convert(a.err)
			switch st.Code() {
			case codes.OK:
				ok++
				if len(a.list.GetReports()) == 0 {
					t.Errorf("ListReports = %v: no reports", a.list)
				}
				if p := a.hdr.Get("ratelimit-policy"); len(p) != 1 || !strings.Contains(p[0], `"reports/concurrency";q=2;qu="concurrent-requests"`) {
					t.Errorf("ratelimit-policy = %q", p)
				}
			case codes.ResourceExhausted:
				denied++
				if grpctest.RetryInfo(st) == nil || !strings.Contains(st.Message(), `Concurrency limit of policy "reports"`) {
					t.Errorf("reports denial: %v, RetryInfo %v; want the concurrency limit named and a retry hint", st.Message(), grpctest.RetryInfo(st))
				}
			default:
				t.Errorf("ListReports: %v", a.err)
			}
		}
		if ok < 2 || denied < 1 {
			t.Errorf("six ListReports at once: %d ran, %d denied; want two or more run (one after another) and some denied", ok, denied)
		}
	})

	t.Run("metrics serve the decisions in Prometheus text over HTTP", func(t *testing.T) {
		actx := grpctest.WithAuth(ctx, "Bearer "+apptest.Token(t, apptest.Tenant(t), "free"))
		for range 3 {
			_, _, _, _ = grpctest.Export(actx, c)
		}
		hs := httptest.NewServer(NewMetricsHandler(a))
		defer hs.Close()
		r := apptest.Do(t, http.MethodGet, hs.URL+app.PathMetrics, "")
		if r.Status != http.StatusOK {
			t.Fatalf("metrics: %d", r.Status)
		}
		apptest.AssertDecisionSeries(t, r.Body)
		if h := apptest.Do(t, http.MethodGet, hs.URL+app.PathHealth, ""); h.Status != http.StatusOK {
			t.Errorf("healthz: %d", h.Status)
		}
	})
}

// The metrics listener's default is a port of its own: not tollgate-rls's
// metrics (127.0.0.1:9464), not an example's listen address.
func TestDefaultMetricsAddrIsItsOwn(t *testing.T) {
	if DefaultMetricsAddr == "127.0.0.1:9464" {
		t.Errorf("DefaultMetricsAddr %s is tollgate-rls's default metrics address", DefaultMetricsAddr)
	}
	for name, addr := range app.DefaultAddrs {
		if addr == DefaultMetricsAddr {
			t.Errorf("DefaultMetricsAddr %s is where %s listens", addr, name)
		}
	}
}
