package connectlimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test service's procedures: two unary calls, a server stream, a
// client stream and the health check.
const (
	pProfile = "/tollgate.test.v1.TestService/GetProfile"
	pItem    = "/tollgate.test.v1.TestService/GetItem"
	pExport  = "/tollgate.test.v1.TestService/Export"
	pUpload  = "/tollgate.test.v1.TestService/Upload"
	pHealth  = "/grpc.health.v1.Health/Check"
	// pCatchAll is the procedure of the handler mounted at "/" when the
	// service has a catch-all: no route names it, so it is charged as the
	// default route.
	pCatchAll = "/"
)

// peerHeader carries the client address a test client stands for: the
// server's outermost handler turns it into the request's RemoteAddr,
// where the network would have put it, and removes it.
const peerHeader = "X-Test-Peer"

// protocols are the wire protocols connect-go serves, as client options.
var protocols = map[string][]connect.ClientOption{
	"connect": nil, // connect-go's default
	"grpc":    {connect.WithGRPC()},
	"grpcweb": {connect.WithGRPCWeb()},
}

// auth is the test authentication interceptor: it verifies the
// conformance suite's credential and stores the tenant, as a real one
// would; it rejects nothing.
type auth struct{}

func (auth) verify(ctx context.Context, h http.Header) context.Context {
	if t, ok := conformance.Authenticate(h.Get("Authorization")); ok {
		return gate.ContextWithTenant(ctx, t)
	}
	return ctx
}

func (a auth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		return next(a.verify(ctx, req.Header()), req)
	}
}

func (auth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a auth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(a.verify(ctx, conn.RequestHeader()), conn)
	}
}

// service counts its handlers' calls; each reports the actual cost the
// request asks for (conformance.ActualCostHeader).
type service struct{ calls atomic.Int64 }

func (s *service) run(ctx context.Context, h http.Header) error {
	s.calls.Add(1)
	if err := conformance.ReportActualCost(ctx, h.Get(conformance.ActualCostHeader)); err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return nil
}

func unary[Req any](s *service, procedure string, opts ...connect.HandlerOption) *connect.Handler {
	return connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[emptypb.Empty], error) {
		if err := s.run(ctx, req.Header()); err != nil {
			return nil, err
		}
		return connect.NewResponse(&emptypb.Empty{}), nil
	}, opts...)
}

// mux serves the test service with interceptors (auth first); catchAll
// also mounts a handler at "/" for every other path.
func (s *service) mux(catchAll bool, interceptors ...connect.Interceptor) *http.ServeMux {
	opts := connect.WithInterceptors(append([]connect.Interceptor{auth{}}, interceptors...)...)
	mux := http.NewServeMux()
	mux.Handle(pProfile, unary[emptypb.Empty](s, pProfile, opts))
	mux.Handle(pItem, unary[wrapperspb.StringValue](s, pItem, opts))
	mux.Handle(pHealth, unary[emptypb.Empty](s, pHealth, opts))
	mux.Handle(pExport, connect.NewServerStreamHandler(pExport, func(ctx context.Context, req *connect.Request[emptypb.Empty], st *connect.ServerStream[wrapperspb.Int64Value]) error {
		if err := s.run(ctx, req.Header()); err != nil {
			return err
		}
		for i := range 3 {
			if err := st.Send(wrapperspb.Int64(int64(i))); err != nil {
				return err
			}
		}
		return nil
	}, opts))
	mux.Handle(pUpload, connect.NewClientStreamHandler(pUpload, func(ctx context.Context, st *connect.ClientStream[wrapperspb.Int64Value]) (*connect.Response[wrapperspb.Int64Value], error) {
		if err := s.run(ctx, st.RequestHeader()); err != nil {
			return nil, err
		}
		var n int64
		for st.Receive() {
			n++
		}
		if err := st.Err(); err != nil {
			return nil, err
		}
		return connect.NewResponse(wrapperspb.Int64(n)), nil
	}, opts))
	if catchAll {
		mux.Handle("/", unary[emptypb.Empty](s, pCatchAll, opts))
	}
	return mux
}

// server serves h on loopback over HTTP/1.1 and cleartext HTTP/2 (gRPC
// needs HTTP/2), honouring peerHeader; it returns its base URL.
func server(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ip := r.Header.Get(peerHeader); ip != "" {
			r.RemoteAddr = net.JoinHostPort(ip, "40000")
			r.Header.Del(peerHeader)
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// httpClient speaks cleartext HTTP/2 to server's servers.
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// redisClient is the shared test Redis (standalone).
func redisClient(t testing.TB) redis.UniversalClient { return redistest.Client(t) }

// newLimiter is a limiter on testTiers over c, under a key prefix of its
// own.
func newLimiter(t testing.TB, c redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	return testkit.NewLimiter(t, c, testTiers(), opts...)
}

// codeOf is err's code, CodeOK (0) for nil.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}
