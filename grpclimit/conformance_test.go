package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// grpcMethods maps the suite's abstract endpoints to the test service's
// full methods: profile and item are unary, export is a server stream
// (charged when it opens), health is the standard health check.
var grpcMethods = map[string]string{
	conformance.EndpointProfile: mProfile,
	conformance.EndpointItem:    mItem,
	conformance.EndpointExport:  mExport,
	conformance.EndpointHealth:  "/grpc.health.v1.Health/Check",
}

// grpcTarget runs the conformance suite over bufconn against the generated
// test service behind grpclimit's interceptors; more are options appended
// to the suite's (a wrong variant's mistake).
type grpcTarget struct{ more []grpclimit.Option }

func (grpcTarget) Protocol() conformance.Protocol { return conformance.ProtocolGRPC }

func (gt grpcTarget) NewInstance(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
	routes := gate.Routes{}
	for name, r := range s.Routes {
		if m, ok := grpcMethods[name]; ok {
			routes[m] = r
		}
	}
	g, err := gate.New(s.Limiter, s.GateOptions(routes)...)
	if err != nil {
		return nil, err
	}
	var srvOpts []grpc.ServerOption
	var svc atomic.Pointer[service]
	if s.CatchAll {
		// the service's handler of every method no service registered: the
		// stream interceptor runs before it, as before a registered stream
		srvOpts = append(srvOpts, grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			svc.Load().calls.Add(1)
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			return ss.SendMsg(new(emptypb.Empty))
		}))
	}
	opts := append([]grpclimit.Option{grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) { s.OnError(err) })}, gt.more...)
	e := newServerEnv(t, g, srvOpts, opts...)
	svc.Store(e.svc)
	return &grpcInstance{t: t, e: e, conns: map[string]*grpc.ClientConn{}}, nil
}

type grpcInstance struct {
	t     testing.TB
	e     *env
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by client IP
}

func (in *grpcInstance) conn(ip string) *grpc.ClientConn {
	in.mu.Lock()
	defer in.mu.Unlock()
	cc, ok := in.conns[ip]
	if !ok {
		cc = in.e.dial(in.t, ip)
		in.conns[ip] = cc
	}
	return cc
}

func (in *grpcInstance) HandlerCalls() int { return int(in.e.svc.calls.Load()) }

func (in *grpcInstance) Do(r conformance.Request) (conformance.Response, error) {
	method, ok := grpcMethods[r.Endpoint]
	if r.Endpoint == conformance.EndpointUnrouted {
		method, ok = conformance.UnroutedMethod, true
	}
	if !ok {
		return conformance.Response{}, errors.New("grpc target: unknown endpoint " + r.Endpoint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md := metadata.MD{}
	if a := r.Authorization(); a != "" {
		md.Set("authorization", a)
	}
	for k, v := range r.Header {
		md.Set(strings.ToLower(k), v)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	cc := in.conn(r.IP())
	var header, trailer metadata.MD
	var err error
	switch method {
	case mProfile:
		_, err = testpb.NewTestServiceClient(cc).GetProfile(ctx, &testpb.GetProfileRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	case mItem:
		_, err = testpb.NewTestServiceClient(cc).GetItem(ctx, &testpb.GetItemRequest{Id: r.Param}, grpc.Header(&header), grpc.Trailer(&trailer))
	case mExport:
		res := export(ctx, testpb.NewTestServiceClient(cc))
		err, header, trailer = res.err, res.header, res.trailer
	case conformance.UnroutedMethod:
		err = cc.Invoke(ctx, method, new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&header), grpc.Trailer(&trailer))
	default:
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	}
	st := status.Convert(err)
	res := conformance.Response{Status: httpStatus(st.Code()), Header: http.Header{}}
	for _, m := range []metadata.MD{header, trailer} {
		for k, vs := range m {
			for _, v := range vs {
				res.Header.Add(k, v) // Add canonicalises the name
			}
		}
	}
	if res.Status == 500 {
		return res, errors.New("grpc target: unexpected status " + st.String())
	}
	if err := retryInfoMatches(st, res.Header.Get("Retry-After")); err != nil {
		return res, err
	}
	return res, nil
}

// retryInfoMatches holds a RESOURCE_EXHAUSTED status to its retry-after
// metadata, which the suite compares: a RetryInfo detail whose exact delay
// rounds up to it (whole seconds, at least 1), and none without it (a cost
// above capacity can never be met).
func retryInfoMatches(st *status.Status, retryAfter string) error {
	if st.Code() != codes.ResourceExhausted {
		return nil
	}
	var info *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			info = ri
		}
	}
	switch {
	case info == nil && retryAfter == "":
		return nil
	case info == nil:
		return errors.New("grpc target: RESOURCE_EXHAUSTED with retry-after " + retryAfter + " but no RetryInfo")
	case retryAfter == "":
		return errors.New("grpc target: RESOURCE_EXHAUSTED with a RetryInfo but no retry-after")
	}
	delay := info.GetRetryDelay().AsDuration()
	if want := strconv.FormatInt(max(1, int64(math.Ceil(delay.Seconds()))), 10); want != retryAfter {
		return fmt.Errorf("grpc target: RetryInfo delay %v rounds up to %s s, retry-after says %s", delay, want, retryAfter)
	}
	return nil
}

func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.ResourceExhausted:
		return 429
	case codes.Unavailable:
		return 503
	case codes.Unauthenticated:
		return 401
	case codes.InvalidArgument:
		return 400
	}
	return 500
}

// health is the health check endpoint, counting its calls with the rest.
type health struct {
	healthpb.UnimplementedHealthServer
	svc *service
}

func (h health) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.svc.calls.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, grpcTarget{})
}

// The suite rejects a gRPC service that gets the standard wrong, which
// proves that the target above can fail the catch-all scenario.
func TestConformanceRejectsWrongVariants(t *testing.T) {
	// a filter that limits only the service's own methods lets the
	// unknown-service handler (a proxy) run unchecked
	t.Run("filter-to-own-services", func(t *testing.T) {
		conformance.RunFailing(t, grpcTarget{more: []grpclimit.Option{grpclimit.WithFilter(func(_ context.Context, m string) bool {
			return strings.HasPrefix(m, "/tollgate.test.") || strings.HasPrefix(m, "/grpc.health.")
		})}}, "catch-all")
	})
}
