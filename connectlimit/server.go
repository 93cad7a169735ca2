package connectlimit

import (
	"context"
	"errors"
	"net"
	"net/http"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// interceptor is the server interceptor over one gate.
type interceptor struct {
	gate *gate.Gate
	cfg  config
}

// NewInterceptor returns a server interceptor that limits the calls of the
// handlers it is given to (connect.WithInterceptors) with gate, built and
// validated once with gate.New (the procedure table keyed
// "/pkg.Service/Method" or "/pkg.Service/*", cost function, header style,
// anonymous callers keyed by the peer IP). For each call it finds the
// tenant an earlier (authentication) interceptor stored with
// gate.ContextWithTenant, charges the procedure's class and cost, and
// either calls the handler with the rate-limit values in the response
// headers, or answers the denial (see the package documentation) without
// calling it. Unary and streaming handlers are limited alike, over the
// Connect, gRPC and gRPC-Web protocols.
//
// It limits handlers only: on a client it passes every call through (use
// [NewClientInterceptor] there).
//
// A nil gate, or an option given a value it cannot use (a denied code
// other than CodeResourceExhausted or CodeUnavailable, a bad
// WithMessageCost), panics here, where the interceptor is built.
func NewInterceptor(g *gate.Gate, opts ...Option) connect.Interceptor {
	if g == nil {
		panic("tollgate: connectlimit.NewInterceptor: nil gate")
	}
	return &interceptor{gate: g, cfg: newConfig(opts)}
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || !i.cfg.Limited(ctx, spec.Procedure) {
			return next(ctx, req)
		}
		v := i.gate.Decide(ctx, endpoint(spec, req.Peer()))
		defer v.Done() // frees a concurrency slot when the handler returns, panics included
		if err := i.answer(ctx, spec.Procedure, v); err != nil {
			return nil, err
		}
		ctx, _ = v.CostContext(ctx) // the handler may gate.ReportCost its actual cost; Done settles it
		if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
			// the response headers, whether the handler answers or fails
			// (as grpclimit's header metadata)
			setHeaders(ci.ResponseHeader(), v.Headers)
			return next(ctx, req)
		}
		res, err := next(ctx, req)
		if err == nil && res != nil {
			setHeaders(res.Header(), v.Headers)
		}
		return res, err
	}
}

// WrapStreamingClient passes client streams through: the interceptor
// limits handlers.
func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		spec := conn.Spec()
		if !i.cfg.Limited(ctx, spec.Procedure) {
			return next(ctx, conn)
		}
		v := i.gate.Decide(ctx, endpoint(spec, conn.Peer()))
		defer v.Done() // a concurrency slot is held (and renewed) for the stream's life
		if err := i.answer(ctx, spec.Procedure, v); err != nil {
			return err
		}
		// sent with the first response message (or with the end of the
		// stream)
		setHeaders(conn.ResponseHeader(), v.Headers)
		ctx, _ = v.CostContext(ctx) // the handler may gate.ReportCost(ctx, n) before it returns
		if i.cfg.Message != nil && v.Checked && (spec.StreamType == connect.StreamTypeClient || spec.StreamType == connect.StreamTypeBidi) {
			conn = &chargedConn{StreamingHandlerConn: conn, ctx: ctx, i: i, tenant: v.Tenant}
		}
		return next(ctx, conn)
	}
}

// chargedConn charges every received message (WithMessageCost).
type chargedConn struct {
	connect.StreamingHandlerConn
	ctx    context.Context
	i      *interceptor
	tenant quota.Tenant
}

// Receive receives a message and charges it; a denied message is dropped
// and the denial's error returned instead.
func (c *chargedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	v := c.i.gate.CheckRoute(c.ctx, c.tenant, *c.i.cfg.Message)
	v.Done() // a message is not in flight once received: its slot, if its class has one, is freed at once
	return c.i.answer(c.ctx, c.Spec().Procedure, v)
}

// answer hands v's error to the error handler and, when v does not
// proceed, returns the connect error to answer with, its metadata set;
// nil: the call or message proceeds.
func (i *interceptor) answer(ctx context.Context, procedure string, v gate.Verdict) error {
	a := i.cfg.Answer(ctx, procedure, v)
	if a == nil {
		return nil
	}
	cause := a.Cause
	if cause == nil {
		cause = errors.New(a.Message)
	}
	err := connect.NewError(a.Code, cause)
	setHeaders(err.Meta(), a.Metadata)
	for _, m := range a.Details {
		if d, derr := connect.NewErrorDetail(m); derr == nil { // always: m is a valid message
			err.AddDetail(d)
		}
	}
	return err
}

// endpoint is the call as core sees it. The peer IP is always filled in:
// the gate uses it only for anonymous callers (gate.WithAnonymous).
func endpoint(spec connect.Spec, p connect.Peer) gate.Endpoint {
	return gate.Endpoint{Pattern: spec.Procedure, ClientIP: peerIP(p.Addr)}
}

// peerIP is the IP of a server-side peer address ("IP:port").
func peerIP(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// setHeaders adds the rate-limit headers to h.
func setHeaders(h http.Header, hs []render.Header) {
	for _, x := range hs {
		h.Add(x.Name, x.Value)
	}
}
