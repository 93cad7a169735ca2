package grpclimit

import (
	"context"
	"net"
	"strings"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// interceptors is a configured pair of server interceptors over one gate.
type interceptors struct {
	gate *gate.Gate
	cfg  config
}

// newInterceptors is the interceptors of fn over g; a nil gate, or an
// option given a value it cannot use, panics, naming fn.
func newInterceptors(fn string, g *gate.Gate, opts []Option) *interceptors {
	if g == nil {
		panic("tollgate: grpclimit." + fn + ": nil gate")
	}
	return &interceptors{gate: g, cfg: newConfig(fn, opts)}
}

// UnaryServerInterceptor limits unary calls with gate, built and validated
// once with gate.New (the method table keyed by full method, cost
// function, header style, anonymous callers keyed by the peer IP): it finds
// the tenant that an earlier (authentication) interceptor stored with
// gate.ContextWithTenant, charges the method's class and cost, and either
// calls the handler with the rate-limit values in header metadata, or
// answers the denial (see the package documentation) without calling it.
//
// A nil gate, or an option given a value it cannot use (a denied code
// other than ResourceExhausted or Unavailable, a bad WithMessageCost),
// panics here, where the interceptor is registered, as
// http.Handle(pattern, nil) does.
func UnaryServerInterceptor(g *gate.Gate, opts ...Option) grpc.UnaryServerInterceptor {
	return newInterceptors("UnaryServerInterceptor", g, opts).unary()
}

// StreamServerInterceptor limits streams with gate: each stream is charged
// once when it opens, before the handler runs, and with [WithMessageCost]
// each message a client or bidi stream receives is charged too. See
// [UnaryServerInterceptor] for the rest, including misconfigurations.
func StreamServerInterceptor(g *gate.Gate, opts ...Option) grpc.StreamServerInterceptor {
	return newInterceptors("StreamServerInterceptor", g, opts).stream()
}

func (i *interceptors) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !i.cfg.Limited(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		v := i.gate.Decide(ctx, i.endpoint(ctx, info.FullMethod))
		defer v.Done() // frees a concurrency slot when the handler returns, panics included
		// SetTrailer before returning the error, and no SetHeader: the
		// answer goes out Trailers-Only.
		if err := i.answer(ctx, info.FullMethod, v, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }); err != nil {
			return nil, err
		}
		if md := headerMD(v.Headers); md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		ctx, _ = v.CostContext(ctx) // the handler may gate.ReportCost its actual cost; Done settles it
		return handler(ctx, req)
	}
}

func (i *interceptors) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if !i.cfg.Limited(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		v := i.gate.Decide(ctx, i.endpoint(ctx, info.FullMethod))
		defer v.Done() // a concurrency slot is held (and renewed) for the stream's life
		if err := i.answer(ctx, info.FullMethod, v, ss.SetTrailer); err != nil {
			return err
		}
		if md := headerMD(v.Headers); md != nil {
			if err := ss.SetHeader(md); err != nil {
				return err
			}
		}
		if cctx, ok := v.CostContext(ctx); ok {
			ss = &costStream{ServerStream: ss, ctx: cctx} // the handler may gate.ReportCost(ss.Context(), n) before it returns
		}
		if i.cfg.Message != nil && info.IsClientStream && v.Checked {
			ss = &chargedStream{ServerStream: ss, i: i, method: info.FullMethod, tenant: v.Tenant}
		}
		return handler(srv, ss)
	}
}

// costStream carries the stream's reservation in its context (ReportCost).
type costStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *costStream) Context() context.Context { return s.ctx }

// chargedStream charges every received message (WithMessageCost).
type chargedStream struct {
	grpc.ServerStream
	i      *interceptors
	method string
	tenant quota.Tenant
}

// RecvMsg receives a message and charges it; a denied message is dropped
// and the denial's status error returned instead.
func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx := s.Context()
	v := s.i.gate.CheckRoute(ctx, s.tenant, *s.i.cfg.Message)
	v.Done() // a message is not in flight once received: its slot, if its class has one, is freed at once
	return s.i.answer(ctx, s.method, v, s.SetTrailer)
}

// answer hands v's error to the error handler and, when v does not
// proceed, sets the trailer with setTrailer and returns the status error;
// nil: the call or message proceeds.
func (i *interceptors) answer(ctx context.Context, method string, v gate.Verdict, setTrailer func(metadata.MD)) error {
	a := i.cfg.Answer(ctx, method, v)
	if a == nil {
		return nil
	}
	if md := headerMD(a.Metadata); md != nil {
		setTrailer(md)
	}
	st := status.New(a.Code, a.Message)
	details := make([]protoadapt.MessageV1, len(a.Details))
	for k, m := range a.Details {
		details[k] = protoadapt.MessageV1Of(m)
	}
	if withDetails, err := st.WithDetails(details...); err == nil { // always: the details are valid messages
		return withDetails.Err()
	}
	return st.Err()
}

// endpoint is the call as core sees it. The peer IP is always filled in:
// the gate uses it only for anonymous callers (gate.WithAnonymous).
func (i *interceptors) endpoint(ctx context.Context, method string) gate.Endpoint {
	return gate.Endpoint{Pattern: method, ClientIP: peerIP(ctx)}
}

// peerIP is the connection's remote IP, without the port.
func peerIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case *net.UDPAddr:
		return a.IP.String()
	}
	s := p.Addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// headerMD is the rate-limit headers as gRPC metadata (lower-case keys).
func headerMD(hs []render.Header) metadata.MD {
	if len(hs) == 0 {
		return nil
	}
	md := make(metadata.MD, len(hs)+1)
	for _, h := range hs {
		k := strings.ToLower(h.Name)
		md[k] = append(md[k], h.Value)
	}
	return md
}
