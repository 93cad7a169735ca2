package examples_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/ginlimit"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/httplimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A program that opens the tier file once (config.Open builds the limiter
// and the one gate it describes, with one Close) and limits a Gin service,
// a net/http service and a gRPC service with that gate: one configuration,
// checked once, and one tenant's buckets shared by every protocol. The file keys the HTTP routes by
// method and template and the gRPC methods by full method.
func Example_oneGate() {
	svc, err := config.Open(context.Background(), "tollgate.yaml",
		config.WithRedisURL(redisURL()),
		config.WithLimiterOptions(core.WithTimeout(2*time.Second), // a busy test machine
			core.WithPrefix("example"))) // keys of its own, never a service's buckets
	if err != nil {
		fmt.Println(err) // the URL, every problem in the file, or Redis down
		return
	}
	defer svc.Close()
	g := svc.Gate // the file's routes, header style, anonymous tier

	// Gin serves the profile...
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(authenticate, ginlimit.Middleware(g))
	r.GET("/v1/profile", func(c *gin.Context) { c.String(http.StatusOK, "profile") })
	ginSrv := httptest.NewServer(r)
	defer ginSrv.Close()

	// ...net/http the exports...
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reports/export", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("exported")) })
	httpSrv := httptest.NewServer(httpAuth(httplimit.Middleware(g)(mux)))
	defer httpSrv.Close()

	// ...and gRPC both.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	grpcSrv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(authenticateUnary, grpclimit.UnaryServerInterceptor(g)),
		grpc.ChainStreamInterceptor(authenticateStream, grpclimit.StreamServerInterceptor(g)),
	)
	demopb.RegisterDemoServer(grpcSrv, demoServer{})
	go func() { _ = grpcSrv.Serve(lis) }()
	defer grpcSrv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	tenant := newTenant()
	get := func(srv *httptest.Server, method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(method, path, resp.StatusCode, "limit", resp.Header.Get("X-RateLimit-Limit"))
	}
	get(ginSrv, "GET", "/v1/profile")
	get(httpSrv, "POST", "/v1/reports/export") // class export, cost 5 of 10
	get(httpSrv, "POST", "/v1/reports/export")

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tenant)
	demo := demopb.NewDemoClient(conn)
	var header metadata.MD
	_, err = demo.GetProfile(ctx, &demopb.GetProfileRequest{}, grpc.Header(&header))
	fmt.Println("GetProfile", status.Code(err), "limit", header.Get("x-ratelimit-limit"))
	// the exports net/http charged drained the tenant's export bucket for
	// gRPC too
	stream, err := demo.ExportReport(ctx, &demopb.ExportReportRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	fmt.Println("ExportReport", status.Code(err))
	// Output:
	// GET /v1/profile 200 limit 20
	// POST /v1/reports/export 200 limit 10
	// POST /v1/reports/export 200 limit 10
	// GetProfile OK limit [20]
	// ExportReport ResourceExhausted
}

// httpAuth, authenticateUnary and authenticateStream stand for your
// authentication, as authenticate does for Gin.
func httpAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			r = r.WithContext(gate.ContextWithTenant(r.Context(), quota.Tenant{ID: id, Tier: "free"}))
		}
		next.ServeHTTP(w, r)
	})
}

func tenantContext(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if id, ok := strings.CutPrefix(v, "Bearer "); ok {
			return gate.ContextWithTenant(ctx, quota.Tenant{ID: id, Tier: "free"})
		}
	}
	return ctx
}

func authenticateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(tenantContext(ctx), req)
}

func authenticateStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, tenantStream{ss, tenantContext(ss.Context())})
}

type tenantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tenantStream) Context() context.Context { return s.ctx }

type demoServer struct{ demopb.UnimplementedDemoServer }

func (demoServer) GetProfile(ctx context.Context, _ *demopb.GetProfileRequest) (*demopb.Profile, error) {
	t, _ := gate.TenantFromContext(ctx)
	return &demopb.Profile{Tenant: t.ID, Tier: t.Tier}, nil
}

func (demoServer) ExportReport(*demopb.ExportReportRequest, grpc.ServerStreamingServer[demopb.ReportChunk]) error {
	return nil
}
