// Command connect is the example service on Connect (connect-go) with
// tollgate's connectlimit interceptor: tollgate.demo.v1.Demo, the gRPC
// example's service (GetProfile, class default, cost 1; ExportReport, a
// server stream, class export, cost 5; ListReports, about 200 ms, class
// reports, for tier free 2 in flight per tenant), served over the Connect,
// gRPC and gRPC-Web protocols on one port, with /metrics and /healthz
// beside it. The bearer token travels in the Authorization header (gRPC:
// "authorization" metadata).
//
//	cd examples && TOLLGATE_DEMO=1 go run ./connect
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" \
//	    -H 'Content-Type: application/json' -d '{}' \
//	    http://127.0.0.1:8099/tollgate.demo.v1.Demo/GetProfile
//
// It listens on ADDR (HTTP/1.1 and cleartext HTTP/2, which gRPC needs).
// See ../README.md.
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/connectlimit"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
)

// The Demo service's procedures, as its generated code would name them.
const (
	ProcedureGetProfile   = "/tollgate.demo.v1.Demo/GetProfile"
	ProcedureExportReport = "/tollgate.demo.v1.Demo/ExportReport"
	ProcedureListReports  = "/tollgate.demo.v1.Demo/ListReports"
)

func main() {
	app.Main("connect", func(ctx context.Context, a *app.App, ln net.Listener) error {
		srv := &http.Server{Handler: NewHandler(a), ReadHeaderTimeout: 10 * time.Second, Protocols: Protocols()}
		return app.Serve(ctx, func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, func() error {
			sctx, cancel := context.WithTimeout(context.Background(), app.ShutdownTimeout)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	})
}

// Protocols are the HTTP versions the service speaks: HTTP/1.1 (Connect,
// gRPC-Web) and cleartext HTTP/2 (gRPC too).
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// NewHandler returns the service: authentication, then the limiter, then
// the Demo service's handlers; /metrics and /healthz are neither
// authenticated nor limited.
func NewHandler(a *app.App) http.Handler {
	limit := connectlimit.NewInterceptor(a.Gate, connectlimit.WithErrorHandler(func(_ context.Context, procedure string, err error) {
		a.LimiterError(procedure, err)
	}))
	opts := connect.WithInterceptors(authenticator{a.Auth}, limit)
	d := &demo{a: a}
	mux := http.NewServeMux()
	mux.Handle(ProcedureGetProfile, connect.NewUnaryHandler(ProcedureGetProfile, d.GetProfile, opts))
	mux.Handle(ProcedureExportReport, connect.NewServerStreamHandler(ProcedureExportReport, d.ExportReport, opts))
	mux.Handle(ProcedureListReports, connect.NewUnaryHandler(ProcedureListReports, d.ListReports, opts))
	mux.Handle("GET "+app.PathMetrics, a.Metrics)
	mux.HandleFunc("GET "+app.PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
}

// authenticator verifies the bearer token in the Authorization header and
// stores the tenant with gate.ContextWithTenant, or answers
// CodeUnauthenticated.
type authenticator struct{ v *app.Verifier }

func (au authenticator) tenant(ctx context.Context, h http.Header) (context.Context, error) {
	t, err := au.v.Authenticate(h.Get("Authorization"))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(app.Detail(err)))
	}
	return gate.ContextWithTenant(ctx, t), nil
}

func (au authenticator) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := au.tenant(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (authenticator) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (au authenticator) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := au.tenant(ctx, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// demo implements tollgate.demo.v1.Demo.
type demo struct{ a *app.App }

func (d *demo) GetProfile(ctx context.Context, _ *connect.Request[demopb.GetProfileRequest]) (*connect.Response[demopb.Profile], error) {
	t, _ := gate.TenantFromContext(ctx)
	p := d.a.GetProfile(t)
	return connect.NewResponse(&demopb.Profile{Tenant: p.Tenant, Tier: p.Tier}), nil
}

func (d *demo) ExportReport(ctx context.Context, req *connect.Request[demopb.ExportReportRequest], stream *connect.ServerStream[demopb.ReportChunk]) error {
	n := req.Msg.GetChunks()
	switch {
	case n == 0:
		n = 3
	case n < 0 || n > 100:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("chunks: want 1 to 100"))
	}
	t, _ := gate.TenantFromContext(ctx)
	r := d.a.ExportReport(t)
	for i := range n {
		line := r.Tenant + "," + r.Format + "," + r.Status
		if err := stream.Send(&demopb.ReportChunk{Seq: i + 1, Data: line}); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) ListReports(ctx context.Context, _ *connect.Request[demopb.ListReportsRequest]) (*connect.Response[demopb.ReportList], error) {
	t, _ := gate.TenantFromContext(ctx)
	r := d.a.ListReports(ctx, t)
	return connect.NewResponse(&demopb.ReportList{Tenant: r.Tenant, Reports: r.Reports}), nil
}
