package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/examples/internal/grpctest"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// one returns the single value of key in md, failing when there is not
// exactly one.
func one(t *testing.T, md metadata.MD, key string) string {
	t.Helper()
	vs := md.Get(key)
	if len(vs) != 1 {
		t.Errorf("metadata %s = %q, want one value", key, vs)
		return ""
	}
	return vs[0]
}

// The gRPC example as a real process over a real TCP connection: the same
// quotas and values as the HTTP examples, ResourceExhausted with RetryInfo
// on the third free export, /metrics beside it, exit 0 on SIGTERM.
func TestGRPCExampleAsProcess(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	addr, maddr := freeAddr(t), freeAddr(t)
	p := start(t, "grpc", "ADDR="+addr, "METRICS_ADDR="+maddr, "REDIS_URL="+redisURL,
		"TOLLGATE_JWT_SECRET="+secret, "DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")
	free, pro := tenantID(t, "grpc-free"), tenantID(t, "grpc-pro")
	freeAuth := "Bearer " + mint(t, secret, free, "free")
	proAuth := "Bearer " + mint(t, secret, pro, "pro")
	wrongAuth := "Bearer " + mint(t, "another-secret-0123456789abcdef", free, "free")
	waitHealthy(t, p, "http://"+maddr+app.PathHealth)

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	c := demopb.NewDemoClient(cc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("health needs no token and is never limited", func(t *testing.T) {
		h := healthpb.NewHealthClient(cc)
		for range 25 {
			r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health: %v, %v", r, err)
			}
		}
	})

	t.Run("no or bad token is Unauthenticated before the limiter", func(t *testing.T) {
		for _, auth := range []string{"", wrongAuth} {
			var hdr metadata.MD
			_, err := c.GetProfile(grpctest.WithAuth(ctx, auth), &demopb.GetProfileRequest{}, grpc.Header(&hdr))
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("GetProfile: %v, want Unauthenticated", err)
			}
			if len(hdr.Get("x-ratelimit-limit")) != 0 {
				t.Errorf("GetProfile: the limiter ran before authentication: %v", hdr)
			}
			if _, _, _, err := grpctest.Export(grpctest.WithAuth(ctx, auth), c); status.Code(err) != codes.Unauthenticated {
				t.Errorf("ExportReport: %v, want Unauthenticated", err)
			}
		}
	})

	// The sequence the HTTP examples answer; the same values.
	t.Run("profile", func(t *testing.T) {
		var hdr metadata.MD
		pr, err := c.GetProfile(grpctest.WithAuth(ctx, freeAuth), &demopb.GetProfileRequest{}, grpc.Header(&hdr))
		if err != nil || pr.GetTenant() != free || pr.GetTier() != "free" {
			t.Fatalf("GetProfile = %v, %v", pr, err)
		}
		for k, want := range map[string]string{"x-ratelimit-limit": "20", "x-ratelimit-remaining": "19",
			"ratelimit": `"default";r=19;t=1`, "ratelimit-policy": `"default";q=20;w=10`} {
			if got := one(t, hdr, k); got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
	})

	t.Run("free export stream is denied on the third call", func(t *testing.T) {
		for i, remaining := range []string{"5", "0"} {
			n, hdr, _, err := grpctest.Export(grpctest.WithAuth(ctx, freeAuth), c)
			if err != nil || n != 2 {
				t.Fatalf("export #%d: %d chunks, %v; want 2, OK", i+1, n, err)
			}
			if one(t, hdr, "x-ratelimit-limit") != "10" || one(t, hdr, "x-ratelimit-remaining") != remaining ||
				one(t, hdr, "ratelimit-policy") != `"export";q=10;w=100` {
				t.Errorf("export #%d header %v, want limit 10, remaining %s", i+1, hdr, remaining)
			}
		}
		n, _, tr, err := grpctest.Export(grpctest.WithAuth(ctx, freeAuth), c)
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || n != 0 {
			t.Fatalf("export #3: %d chunks, %v; want ResourceExhausted before any chunk", n, err)
		}
		retry := grpctest.RetryInfo(st)
		delay := retry.GetRetryDelay().AsDuration()
		if retry == nil || delay < 45*time.Second || delay > 50*time.Second {
			t.Fatalf("RetryInfo = %v, want 45..50 s", retry)
		}
		ra, err := strconv.Atoi(one(t, tr, "retry-after"))
		if err != nil || ra < 45 || ra > 50 || float64(ra) < delay.Seconds() || float64(ra) >= delay.Seconds()+1 {
			t.Errorf("retry-after trailer %q, want the RetryInfo delay %v rounded up", tr.Get("retry-after"), delay)
		}
		if ms, err := strconv.ParseInt(one(t, tr, "grpc-retry-pushback-ms"), 10, 64); err != nil || ms < delay.Milliseconds() || ms > delay.Milliseconds()+1 {
			t.Errorf("grpc-retry-pushback-ms trailer %q, want %d", tr.Get("grpc-retry-pushback-ms"), delay.Milliseconds())
		}
		if got, want := one(t, tr, "ratelimit"), `"export";r=0;t=`+strconv.Itoa(ra); got != want {
			t.Errorf("ratelimit trailer %q, want %q", got, want)
		}
		if got := one(t, tr, "ratelimit-policy"); got != `"export";q=10;w=100` {
			t.Errorf("ratelimit-policy trailer %q", got)
		}
		// Classes are separate buckets: the profile still answers.
		if _, err := c.GetProfile(grpctest.WithAuth(ctx, freeAuth), &demopb.GetProfileRequest{}); err != nil {
			t.Errorf("GetProfile after the denied export: %v", err)
		}
	})

	t.Run("pro export", func(t *testing.T) {
		n, hdr, _, err := grpctest.Export(grpctest.WithAuth(ctx, proAuth), c)
		if err != nil || n != 2 || one(t, hdr, "x-ratelimit-limit") != "100" || one(t, hdr, "x-ratelimit-remaining") != "95" {
			t.Errorf("pro export: %d chunks, %v, header %v", n, err, hdr)
		}
	})

	t.Run("metrics beside gRPC hold the decisions", func(t *testing.T) {
		cl := newClient(t)
		r := cl.do(t, http.MethodGet, "http://"+maddr+app.PathMetrics, "")
		cl.tr.CloseIdleConnections()
		if r.status != http.StatusOK {
			t.Fatalf("metrics: %d", r.status)
		}
		apptest.AssertDecisionSeries(t, r.body)
	})

	_ = cc.Close()
	stop(t, p)
}
