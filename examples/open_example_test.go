package examples_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/ginlimit"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/httplimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// One program, one tier file, three frameworks: config.Open builds the
// service tollgate.yaml describes, and Gin, net/http and gRPC are limited
// by it. One tenant's requests through all three draw on the same buckets
// in Redis: the profile (class default, cost 1) by Gin and by gRPC, the
// export (class export, cost 5) by net/http.
func Example_openService() {
	ctx := context.Background()
	svc, err := config.Open(ctx, "tollgate.yaml",
		config.WithRedisURL(redisURL()),
		config.WithLimiterOptions(core.WithTimeout(2*time.Second))) // a busy test machine
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	gateOpts := svc.Config.GateOptions() // routes, grpc_methods, header style

	// Gin
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.Use(authenticate, ginlimit.Middleware(svc.Limiter, ginlimit.WithGateOptions(gateOpts...)))
	g.GET("/v1/profile", func(c *gin.Context) { c.String(http.StatusOK, "profile") })
	ginSrv := httptest.NewServer(g)
	defer ginSrv.Close()

	// net/http
	limit := httplimit.Middleware(svc.Limiter, httplimit.WithGateOptions(gateOpts...))
	mux := http.NewServeMux()
	mux.Handle("POST /v1/reports/export", authenticateHTTP(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("exported"))
	}))))
	httpSrv := httptest.NewServer(mux)
	defer httpSrv.Close()

	// gRPC
	interceptors, err := grpclimit.New(svc.Limiter, grpclimit.WithGateOptions(gateOpts...))
	if err != nil {
		fmt.Println(err)
		return
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticateGRPC, interceptors.Unary()))
	demopb.RegisterDemoServer(gs, profiles{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()

	tenant := newTenant()
	do := func(method, url string) {
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("Authorization", "Bearer "+tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(method, req.URL.Path, resp.StatusCode, "remaining", resp.Header.Get("X-RateLimit-Remaining"))
	}
	do("GET", ginSrv.URL+"/v1/profile")
	var header metadata.MD
	cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tenant), 10*time.Second)
	defer cancel()
	if _, err := demopb.NewDemoClient(cc).GetProfile(cctx, &demopb.GetProfileRequest{}, grpc.Header(&header)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("gRPC GetProfile OK remaining", header.Get("x-ratelimit-remaining"))
	do("POST", httpSrv.URL+"/v1/reports/export")
	do("POST", httpSrv.URL+"/v1/reports/export")
	do("POST", httpSrv.URL+"/v1/reports/export")
	// Output:
	// GET /v1/profile 200 remaining 19
	// gRPC GetProfile OK remaining [18]
	// POST /v1/reports/export 200 remaining 5
	// POST /v1/reports/export 200 remaining 0
	// POST /v1/reports/export 429 remaining 0
}

// authenticateHTTP and authenticateGRPC stand for your authentication, as
// authenticate does for Gin: the bearer "token" is the tenant ID itself
// (never do that).
func authenticateHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		if _, err := fmt.Sscanf(r.Header.Get("Authorization"), "Bearer %s", &id); err == nil {
			r = r.WithContext(core.ContextWithTenant(r.Context(), core.Tenant{ID: id, Tier: "free"}))
		}
		next.ServeHTTP(w, r)
	})
}

func authenticateGRPC(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var id string
	if vs := md.Get("authorization"); len(vs) > 0 {
		if _, err := fmt.Sscanf(vs[0], "Bearer %s", &id); err == nil {
			ctx = core.ContextWithTenant(ctx, core.Tenant{ID: id, Tier: "free"})
		}
	}
	return handler(ctx, req)
}

// profiles serves the Demo service's GetProfile.
type profiles struct{ demopb.UnimplementedDemoServer }

func (profiles) GetProfile(ctx context.Context, _ *demopb.GetProfileRequest) (*demopb.Profile, error) {
	t, _ := core.TenantFromContext(ctx)
	return &demopb.Profile{Tenant: t.ID, Tier: t.Tier}, nil
}
