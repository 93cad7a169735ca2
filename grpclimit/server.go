package grpclimit

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// pushbackKey is the gRFC A6 trailer a denial carries: the retry delay in
// whole milliseconds, rounded up, or -1 ("do not retry") when the cost can
// never be met. grpc-go clients with a retry policy honour it. (The
// retry-after trailer of an over-limit denial comes from core's headers.)
const pushbackKey = "grpc-retry-pushback-ms"

// ErrorInfo of a denial (the package documentation lists them).
const (
	// errorReason is the ErrorInfo reason of every denial.
	errorReason = "RATE_LIMIT_EXCEEDED"
	// ErrorInfo metadata keys: the binding policy (bucket), its capacity,
	// the tokens left (rounded down), the call's cost, and the core reason
	// ("over_limit", or "cost_exceeds_capacity" when it can never be met).
	metaPolicy    = "policy"
	metaLimit     = "limit"
	metaRemaining = "remaining"
	metaCost      = "cost"
	metaReason    = "reason"
)

// misconfiguredMessage is the status message of every misconfiguration
// answer (codes.Internal): fixed, the cause goes to the error handler only.
var misconfiguredMessage = render.MisconfiguredProblem().Detail

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
		if !i.limited(ctx, info.FullMethod) {
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
		if !i.limited(ctx, info.FullMethod) {
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
		if i.cfg.message != nil && info.IsClientStream && v.Checked {
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
	v := s.i.gate.CheckRoute(ctx, s.tenant, *s.i.cfg.message)
	v.Done() // a message is not in flight once received: its slot, if its class has one, is freed at once
	return s.i.answer(ctx, s.method, v, s.SetTrailer)
}

// answer reports v's error (WithErrorHandler) and, when v does not
// proceed, sets the trailer with setTrailer and returns the status error;
// nil: the call or message proceeds.
func (i *interceptors) answer(ctx context.Context, method string, v gate.Verdict, setTrailer func(metadata.MD)) error {
	i.report(ctx, method, v)
	if v.Proceed {
		return nil
	}
	if md := i.trailer(v); md != nil {
		setTrailer(md)
	}
	return i.statusOf(v).Err()
}

func (i *interceptors) limited(ctx context.Context, method string) bool {
	for _, f := range i.cfg.filters {
		if !f(ctx, method) {
			return false
		}
	}
	return true
}

// endpoint is the call as core sees it. The peer IP is always filled in:
// the gate uses it only for anonymous callers (gate.WithAnonymous).
func (i *interceptors) endpoint(ctx context.Context, method string) gate.Endpoint {
	return gate.Endpoint{Pattern: method, ClientIP: peerIP(ctx)}
}

func (i *interceptors) report(ctx context.Context, method string, v gate.Verdict) {
	if v.Err != nil && i.cfg.onError != nil {
		i.cfg.onError(ctx, method, v.Err)
	}
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

// trailer is the trailer metadata of an answer that does not proceed: the
// rate-limit headers and, for a denial, the pushback.
func (i *interceptors) trailer(v gate.Verdict) metadata.MD {
	md := headerMD(v.Headers)
	if v.Decision.Denied() || v.Decision.Reason == core.ReasonOverloaded {
		if md == nil {
			md = metadata.MD{}
		}
		md[pushbackKey] = []string{strconv.FormatInt(render.PushbackMillis(v.Decision), 10)}
	}
	return md
}

// statusOf maps a Verdict that does not proceed to a gRPC status.
func (i *interceptors) statusOf(v gate.Verdict) *status.Status {
	d := v.Decision
	switch {
	case v.Unauthenticated:
		return status.New(codes.Unauthenticated, v.Problem.Detail)
	case d.Denied():
		return i.denial(v)
	case d.Reason == core.ReasonFailedClosed:
		return status.New(codes.Unavailable, v.Problem.Detail)
	case d.Reason == core.ReasonOverloaded:
		// shed: retry later, with a hint (RetryInfo and the pushback trailer)
		st := status.New(codes.Unavailable, v.Problem.Detail)
		if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(render.PushbackMillis(d)) * time.Millisecond)}); err == nil {
			return withRetry
		}
		return st
	case d.Reason == core.ReasonCanceled:
		// the call's own context ended: Canceled or DeadlineExceeded
		return status.FromContextError(v.Err)
	case d.Reason == core.ReasonInvalid:
		return status.New(codes.InvalidArgument, v.Problem.Detail)
	case d.Reason == core.ReasonUnresolved:
		return status.New(codes.Internal, misconfiguredMessage)
	}
	return status.New(codes.Internal, misconfiguredMessage)
}

// denial is the status of a denied call: the configured code, with one
// ErrorInfo, one QuotaFailure and, unless the cost can never be met, one
// RetryInfo with the exact delay.
func (i *interceptors) denial(v gate.Verdict) *status.Status {
	d := v.Decision
	st := status.New(i.cfg.deniedCode, v.Problem.Detail)
	details := make([]protoadapt.MessageV1, 0, 3)
	details = append(details, &errdetails.ErrorInfo{
		Reason: errorReason,
		Domain: i.cfg.domain,
		Metadata: map[string]string{
			metaPolicy:    d.Bucket,
			metaLimit:     strconv.FormatInt(d.Limit, 10),
			metaRemaining: strconv.FormatInt(d.Remaining, 10),
			metaCost:      strconv.FormatInt(d.Cost, 10),
			metaReason:    d.Reason.String(),
		},
	})
	if d.Reason == core.ReasonOverLimit || d.Reason == core.ReasonConcurrencyLimit {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     v.Tenant.Subject(),
		Description: v.Problem.Detail,
	}}})
	withDetails, err := st.WithDetails(details...)
	if err != nil { // unreachable: the details are valid messages
		return st
	}
	return withDetails
}
