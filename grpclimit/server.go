package grpclimit

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Metadata keys grpclimit writes besides the lower-cased rate-limit
// headers.
const (
	// PushbackKey is the gRFC A6 trailer a denial carries: the retry delay
	// in whole milliseconds, rounded up, or -1 ("do not retry") when the
	// cost can never be met. grpc-go clients with a retry policy honour it.
	PushbackKey = "grpc-retry-pushback-ms"
	// RetryAfterKey is the Retry-After trailer of an over-limit denial:
	// whole seconds, at least 1, as in HTTP.
	RetryAfterKey = "retry-after"
)

// ErrorInfo of a denial.
const (
	// Reason is the ErrorInfo reason of every denial.
	Reason = "RATE_LIMIT_EXCEEDED"
	// ErrorInfo metadata keys: the binding policy (bucket), its capacity,
	// the tokens left (rounded down), the call's cost, and the core reason
	// ("over_limit", or "cost_exceeds_capacity" when it can never be met).
	MetaPolicy    = "policy"
	MetaLimit     = "limit"
	MetaRemaining = "remaining"
	MetaCost      = "cost"
	MetaReason    = "reason"
)

// Interceptors is a configured pair of server interceptors over one gate.
// Build it with [New] to get configuration errors; [UnaryServerInterceptor]
// and [StreamServerInterceptor] are shorthands.
type Interceptors struct {
	gate *core.Gate
	cfg  config
}

// New validates the configuration and returns the interceptor pair. The
// error wraps core.ErrInvalidConfig (or core's route validation error).
func New(lim *core.Limiter, opts ...Option) (*Interceptors, error) {
	cfg := newConfig(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := core.NewGate(lim, cfg.gate...)
	if err != nil {
		return nil, err
	}
	return &Interceptors{gate: g, cfg: cfg}, nil
}

// UnaryServerInterceptor limits unary calls: it finds the tenant that an
// earlier (authentication) interceptor stored with core.ContextWithTenant,
// charges the method's class and cost, and either calls the handler with
// the rate-limit values in header metadata, or answers the denial (see the
// package documentation) without calling it.
//
// A bad configuration (nil limiter, invalid routes, a denied code other
// than ResourceExhausted or Unavailable) does not panic: every call then
// fails with codes.Internal naming the problem. Use [New] to get the error
// at start-up instead.
func UnaryServerInterceptor(lim *core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := New(lim, opts...)
	if err != nil {
		st := status.New(codes.Internal, err.Error())
		return func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, st.Err()
		}
	}
	return i.Unary()
}

// StreamServerInterceptor limits streams: each stream is charged once when
// it opens, before the handler runs, and with [WithMessageCost] each
// message a client or bidi stream receives is charged too. See
// [UnaryServerInterceptor] for the rest, including configuration errors.
func StreamServerInterceptor(lim *core.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	i, err := New(lim, opts...)
	if err != nil {
		st := status.New(codes.Internal, err.Error())
		return func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
			return st.Err()
		}
	}
	return i.Stream()
}

// Gate returns the core gate the interceptors decide with.
func (i *Interceptors) Gate() *core.Gate { return i.gate }

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
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
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
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
		if i.cfg.message != nil && info.IsClientStream && v.Checked {
			ss = &chargedStream{ServerStream: ss, i: i, method: info.FullMethod, tenant: v.Tenant}
		}
		return handler(srv, ss)
	}
}

// chargedStream charges every received message (WithMessageCost).
type chargedStream struct {
	grpc.ServerStream
	i      *Interceptors
	method string
	tenant core.Tenant
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
func (i *Interceptors) answer(ctx context.Context, method string, v core.Verdict, setTrailer func(metadata.MD)) error {
	i.report(ctx, method, v)
	if v.Proceed {
		return nil
	}
	if md := i.trailer(v); md != nil {
		setTrailer(md)
	}
	return i.statusOf(v).Err()
}

func (i *Interceptors) limited(ctx context.Context, method string) bool {
	for _, f := range i.cfg.filters {
		if !f(ctx, method) {
			return false
		}
	}
	return true
}

// endpoint is the call as core sees it. The peer IP is always filled in:
// the gate uses it only for anonymous callers, however that option was
// given (WithAnonymous or WithGateOptions).
func (i *Interceptors) endpoint(ctx context.Context, method string) core.Endpoint {
	return core.Endpoint{Pattern: method, ClientIP: peerIP(ctx)}
}

func (i *Interceptors) report(ctx context.Context, method string, v core.Verdict) {
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
func headerMD(hs []core.Header) metadata.MD {
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
func (i *Interceptors) trailer(v core.Verdict) metadata.MD {
	md := headerMD(v.Headers)
	if v.Decision.Denied() || v.Decision.Reason == core.ReasonOverloaded {
		if md == nil {
			md = metadata.MD{}
		}
		md[PushbackKey] = []string{strconv.FormatInt(v.Decision.PushbackMillis(), 10)}
	}
	return md
}

// statusOf maps a Verdict that does not proceed to a gRPC status.
func (i *Interceptors) statusOf(v core.Verdict) *status.Status {
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
		if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(d.PushbackMillis()) * time.Millisecond)}); err == nil {
			return withRetry
		}
		return st
	case d.Reason == core.ReasonCanceled:
		// the call's own context ended: Canceled or DeadlineExceeded
		return status.FromContextError(v.Err)
	case d.Reason == core.ReasonInvalid:
		return status.New(codes.InvalidArgument, v.Problem.Detail)
	case d.Reason == core.ReasonUnresolved:
		return status.New(codes.Internal, v.Problem.Detail)
	}
	return status.New(codes.Internal, "grpclimit: unexpected rate limit verdict "+d.Reason.String())
}

// denial is the status of a denied call: the configured code, with one
// ErrorInfo, one QuotaFailure and, unless the cost can never be met, one
// RetryInfo with the exact delay.
func (i *Interceptors) denial(v core.Verdict) *status.Status {
	d := v.Decision
	st := status.New(i.cfg.deniedCode, v.Problem.Detail)
	details := make([]protoadapt.MessageV1, 0, 3)
	details = append(details, &errdetails.ErrorInfo{
		Reason: Reason,
		Domain: i.cfg.domain,
		Metadata: map[string]string{
			MetaPolicy:    d.Bucket,
			MetaLimit:     strconv.FormatInt(d.Limit, 10),
			MetaRemaining: strconv.FormatInt(d.Remaining, 10),
			MetaCost:      strconv.FormatInt(d.Cost, 10),
			MetaReason:    d.Reason.String(),
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
