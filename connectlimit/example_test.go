package connectlimit_test

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/connectlimit"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A Connect service limited per tenant: the authentication interceptor
// (yours) stores the verified tenant, connectlimit charges the procedure.
func ExampleNewInterceptor() {
	var lim *core.Limiter        // core.New(redisClient, resolver)
	var auth connect.Interceptor // verifies the token, gate.ContextWithTenant
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		"/reports.v1.Reports/Export": {Class: "export", Cost: 10},
	}))
	if err != nil {
		panic(err) // a bad procedure table, named
	}
	limit := connectlimit.NewInterceptor(g, connectlimit.WithErrorHandler(func(_ context.Context, procedure string, err error) {
		// log or count the limiter's errors
	}))
	mux := http.NewServeMux()
	mux.Handle("/reports.v1.Reports/Export", connect.NewUnaryHandler("/reports.v1.Reports/Export",
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		},
		connect.WithInterceptors(auth, limit)))
}

// A client that backs off when the server throttles it, on any protocol.
func ExampleNewClientInterceptor() {
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](http.DefaultClient, "https://api.example.com/reports.v1.Reports/Export",
		connect.WithGRPC(),
		connect.WithInterceptors(connectlimit.NewClientInterceptor(retry.WithMaxAttempts(4))))
	_ = client
}
