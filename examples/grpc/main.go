// Command grpc is the example service on gRPC with tollgate's grpclimit
// interceptors: tollgate.demo.v1.Demo, the same API as the HTTP examples
// (GetProfile, class default, cost 1; ExportReport, a server stream, class
// export, cost 5; ListReports, about 200 ms, class reports, for tier free 2
// in flight per tenant), with server reflection and the standard health service.
// The bearer token travels in the "authorization" metadata.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./grpc
//	grpcurl -plaintext -H "authorization: Bearer $(go run ./cmd/mint -tenant t42)" \
//	    127.0.0.1:8095 tollgate.demo.v1.Demo/GetProfile
//
// gRPC listens on ADDR; /metrics and /healthz are served over HTTP on
// METRICS_ADDR (default 127.0.0.1:9475). See ../README.md.
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// DefaultMetricsAddr is where /metrics is served unless METRICS_ADDR says
// otherwise.
const DefaultMetricsAddr = "127.0.0.1:9475"

func main() {
	app.Main("grpc", func(ctx context.Context, a *app.App, ln net.Listener) error {
		srv, err := NewServer(a)
		if err != nil {
			return err
		}
		maddr := os.Getenv("METRICS_ADDR")
		if maddr == "" {
			maddr = DefaultMetricsAddr
		}
		mln, err := net.Listen("tcp", maddr)
		if err != nil {
			return err
		}
		a.Log.Info("metrics listening", "addr", "http://"+mln.Addr().String()+app.PathMetrics)
		errc := make(chan error, 2)
		go func() { errc <- srv.Serve(ln) }()
		go func() { errc <- app.ServeHTTP(ctx, mln, NewMetricsHandler(a)) }()
		select {
		case <-ctx.Done():
			srv.GracefulStop()
		case err = <-errc:
			srv.Stop()
		}
		err2 := <-errc
		if err == nil && !errors.Is(err2, grpc.ErrServerStopped) {
			err = err2
		}
		return err
	})
}

// NewServer returns the gRPC service: authentication, then the limiter,
// then the Demo service. Reflection and health are neither authenticated
// nor limited.
func NewServer(a *app.App) (*grpc.Server, error) {
	opts := []grpclimit.Option{
		grpclimit.WithFilter(func(_ context.Context, method string) bool { return !open(method) }),
		grpclimit.WithErrorHandler(func(_ context.Context, method string, err error) {
			a.LimiterError(method, err)
		}),
	}
	auth := authenticator{a.Auth}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth.unary, grpclimit.UnaryServerInterceptor(a.Gate, opts...)),
		grpc.ChainStreamInterceptor(auth.stream, grpclimit.StreamServerInterceptor(a.Gate, opts...)),
	)
	demopb.RegisterDemoServer(srv, &demo{a: a})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, nil
}

// NewMetricsHandler serves /metrics and /healthz over HTTP beside gRPC.
func NewMetricsHandler(a *app.App) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+app.PathMetrics, a.Metrics)
	mux.HandleFunc("GET "+app.PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
}

// open reports whether a method is served without a token or a limit.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.reflection.") || strings.HasPrefix(method, "/grpc.health.")
}

// authenticator verifies the bearer token in the "authorization" metadata
// and stores the tenant with gate.ContextWithTenant, or answers
// Unauthenticated.
type authenticator struct{ v *app.Verifier }

func (au authenticator) tenant(ctx context.Context, method string) (context.Context, error) {
	if open(method) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var value string
	if vs := md.Get("authorization"); len(vs) > 0 {
		value = vs[0]
	}
	t, err := au.v.Authenticate(value)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, app.Detail(err))
	}
	return gate.ContextWithTenant(ctx, t), nil
}

func (au authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := au.tenant(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (au authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := au.tenant(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, &tenantStream{ServerStream: ss, ctx: ctx})
}

type tenantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tenantStream) Context() context.Context { return s.ctx }

// demo implements tollgate.demo.v1.Demo.
type demo struct {
	demopb.UnimplementedDemoServer
	a *app.App
}

func (d *demo) GetProfile(ctx context.Context, _ *demopb.GetProfileRequest) (*demopb.Profile, error) {
	t, _ := gate.TenantFromContext(ctx)
	p := d.a.GetProfile(t)
	return &demopb.Profile{Tenant: p.Tenant, Tier: p.Tier}, nil
}

func (d *demo) ExportReport(req *demopb.ExportReportRequest, stream grpc.ServerStreamingServer[demopb.ReportChunk]) error {
	n := req.GetChunks()
	switch {
	case n == 0:
		n = 3
	case n < 0 || n > 100:
		return status.Errorf(codes.InvalidArgument, "chunks: %d, want 1 to 100", n)
	}
	t, _ := gate.TenantFromContext(stream.Context())
	r := d.a.ExportReport(t)
	for i := range n {
		line := r.Tenant + "," + r.Format + "," + r.Status
		if err := stream.Send(&demopb.ReportChunk{Seq: i + 1, Data: line}); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) ListReports(ctx context.Context, _ *demopb.ListReportsRequest) (*demopb.ReportList, error) {
	t, _ := gate.TenantFromContext(ctx)
	r := d.a.ListReports(ctx, t)
	return &demopb.ReportList{Tenant: r.Tenant, Reports: r.Reports}, nil
}
