package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/connectlimit"
	"github.com/tollgate-go/tollgate/core/gate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// procedures maps the suite's abstract endpoints to the test service's
// procedures: profile and item are unary, export is a server stream
// (charged when it opens), health is the health check.
var procedures = map[string]string{
	conformance.EndpointProfile: pProfile,
	conformance.EndpointItem:    pItem,
	conformance.EndpointExport:  pExport,
	conformance.EndpointHealth:  pHealth,
}

// connectTarget runs the conformance suite over loopback HTTP against the
// test service behind connectlimit's interceptor, its client speaking one
// of connect-go's protocols; more are options appended to the suite's (a
// wrong variant's mistake).
type connectTarget struct {
	protocol []connect.ClientOption
	more     []connectlimit.Option
}

func (connectTarget) Protocol() conformance.Protocol { return conformance.ProtocolGRPC }

func (ct connectTarget) NewInstance(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
	routes := gate.Routes{}
	for name, r := range s.Routes {
		routes[procedures[name]] = r
	}
	g, err := gate.New(s.Limiter, s.GateOptions(routes)...)
	if err != nil {
		return nil, err
	}
	opts := append([]connectlimit.Option{connectlimit.WithErrorHandler(func(_ context.Context, _ string, err error) { s.OnError(err) })}, ct.more...)
	svc := &service{}
	url := server(t, svc.mux(s.CatchAll, connectlimit.NewInterceptor(g, opts...)))
	return &instance{svc: svc, url: url, hc: httpClient(t), protocol: ct.protocol}, nil
}

type instance struct {
	svc      *service
	url      string
	hc       *http.Client
	protocol []connect.ClientOption
}

func (in *instance) HandlerCalls() int { return int(in.svc.calls.Load()) }

func (in *instance) Do(r conformance.Request) (conformance.Response, error) {
	procedure, ok := procedures[r.Endpoint]
	if r.Endpoint == conformance.EndpointUnrouted {
		procedure, ok = conformance.UnroutedMethod, true
	}
	if !ok {
		return conformance.Response{}, errors.New("connect target: unknown endpoint " + r.Endpoint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	setHeader := func(h http.Header) {
		if a := r.Authorization(); a != "" {
			h.Set("Authorization", a)
		}
		for k, v := range r.Header {
			h.Set(k, v)
		}
		h.Set(peerHeader, r.IP())
	}
	res := conformance.Response{Header: http.Header{}}
	var err error
	switch procedure {
	case pExport:
		req := connect.NewRequest(&emptypb.Empty{})
		setHeader(req.Header())
		var st *connect.ServerStreamForClient[wrapperspb.Int64Value]
		st, err = connect.NewClient[emptypb.Empty, wrapperspb.Int64Value](in.hc, in.url+procedure, in.protocol...).CallServerStream(ctx, req)
		if err == nil {
			for st.Receive() {
			}
			if err = st.Err(); err == nil {
				addAll(res.Header, st.ResponseHeader(), st.ResponseTrailer())
			}
			_ = st.Close()
		}
	case pItem:
		req := connect.NewRequest(wrapperspb.String(r.Param))
		setHeader(req.Header())
		var out *connect.Response[emptypb.Empty]
		out, err = connect.NewClient[wrapperspb.StringValue, emptypb.Empty](in.hc, in.url+procedure, in.protocol...).CallUnary(ctx, req)
		if err == nil {
			addAll(res.Header, out.Header(), out.Trailer())
		}
	default:
		req := connect.NewRequest(&emptypb.Empty{})
		setHeader(req.Header())
		var out *connect.Response[emptypb.Empty]
		out, err = connect.NewClient[emptypb.Empty, emptypb.Empty](in.hc, in.url+procedure, in.protocol...).CallUnary(ctx, req)
		if err == nil {
			addAll(res.Header, out.Header(), out.Trailer())
		}
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		addAll(res.Header, ce.Meta()) // the union of the headers and trailers
	}
	res.Status = httpStatus(codeOf(err))
	if res.Status == 500 {
		return res, fmt.Errorf("connect target: unexpected error %v", err)
	}
	if err := retryInfoMatches(err, res.Header.Get("Retry-After")); err != nil {
		return res, err
	}
	return res, nil
}

func addAll(into http.Header, from ...http.Header) {
	for _, h := range from {
		for k, vs := range h {
			for _, v := range vs {
				into.Add(k, v)
			}
		}
	}
}

// retryInfoMatches holds a CodeResourceExhausted error to its Retry-After
// metadata, which the suite compares: a RetryInfo detail whose exact delay
// rounds up to it (whole seconds, at least 1), and none without it (a cost
// above capacity can never be met).
func retryInfoMatches(err error, retryAfter string) error {
	if codeOf(err) != connect.CodeResourceExhausted {
		return nil
	}
	var info *errdetails.RetryInfo
	var ce *connect.Error
	errors.As(err, &ce)
	for _, d := range ce.Details() {
		if m, verr := d.Value(); verr == nil {
			if ri, ok := m.(*errdetails.RetryInfo); ok {
				info = ri
			}
		}
	}
	switch {
	case info == nil && retryAfter == "":
		return nil
	case info == nil:
		return errors.New("connect target: CodeResourceExhausted with Retry-After " + retryAfter + " but no RetryInfo")
	case retryAfter == "":
		return errors.New("connect target: CodeResourceExhausted with a RetryInfo but no Retry-After")
	}
	delay := info.GetRetryDelay().AsDuration()
	if want := strconv.FormatInt(max(1, int64(math.Ceil(delay.Seconds()))), 10); want != retryAfter {
		return fmt.Errorf("connect target: RetryInfo delay %v rounds up to %s s, Retry-After says %s", delay, want, retryAfter)
	}
	return nil
}

func httpStatus(c connect.Code) int {
	switch c {
	case 0:
		return 200
	case connect.CodeResourceExhausted:
		return 429
	case connect.CodeUnavailable:
		return 503
	case connect.CodeUnauthenticated:
		return 401
	case connect.CodeInvalidArgument:
		return 400
	}
	return 500
}

// TestConformance runs the suite once per protocol connect-go serves:
// the answers and the metadata the suite compares are the same on all
// three.
func TestConformance(t *testing.T) {
	for _, name := range []string{"connect", "grpc", "grpcweb"} {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, connectTarget{protocol: protocols[name]})
		})
	}
}

// The suite rejects a service that answers a denial as the wrong code,
// which proves that the target above can fail it.
func TestConformanceRejectsWrongVariants(t *testing.T) {
	// a denial as Unavailable is no rate-limit answer to the suite
	t.Run("denied-as-unavailable", func(t *testing.T) {
		conformance.RunFailing(t, connectTarget{more: []connectlimit.Option{connectlimit.WithDeniedCode(connect.CodeUnavailable)}}, "burst-then-deny")
	})
}
