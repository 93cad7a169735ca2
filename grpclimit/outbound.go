package grpclimit

import (
	"context"
	"fmt"

	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type waiter struct {
	lim     *core.Limiter
	request func(ctx context.Context, fullMethod string, req any) core.Request
	actual  func(string, any, metadata.MD, metadata.MD) (int64, bool)
}

// WaitUnaryClientInterceptor returns a client interceptor that waits on
// lim's shared buckets before it sends each call: request names the
// tenant, class and cost of an outgoing call, and core.Limiter.Wait waits
// its turn, the longest wait being the time left until the call context's
// deadline (without one, the limiter's WithMaxWait). Across every process
// that calls the same upstream through the same buckets, the upstream then
// receives at most their quota (see core.Limiter.Reserve for the bound and
// the order).
//
// A call the quota does not admit in time is not sent and fails with
// ResourceExhausted; one whose context ends first, with the context's
// code (Canceled, DeadlineExceeded); one the store fails closed, with
// Unavailable. A call the store fails open is sent at once.
//
// actual, when not nil, reads what a call really cost from its answer
// (header or trailer metadata an upstream sets, or the reply itself): ok
// true settles the call's reservation to that cost (core.Limiter.Settle)
// once the call has returned without error; a settle that fails leaves the
// estimate standing (core logs a store failure; a request with AlsoCosts
// different from its Cost is never settled). nil: the estimate stands.
//
// A nil limiter or request function panics here.
func WaitUnaryClientInterceptor(lim *core.Limiter, request func(ctx context.Context, fullMethod string, req any) core.Request,
	actual func(fullMethod string, reply any, header, trailer metadata.MD) (cost int64, ok bool)) grpc.UnaryClientInterceptor {
	if lim == nil {
		panic("tollgate: grpclimit.WaitUnaryClientInterceptor: nil limiter")
	}
	if request == nil {
		panic("tollgate: grpclimit.WaitUnaryClientInterceptor: nil request function")
	}
	w := &waiter{lim: lim, request: request, actual: actual}
	return w.intercept
}

func (w *waiter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r := w.request(ctx, method, req)
	d, err := w.lim.Wait(ctx, r)
	if !d.Allowed {
		return notSent(ctx, d, err)
	}
	if w.actual == nil || !d.Settleable() {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var header, trailer metadata.MD
	opts = append(opts, grpc.Header(&header), grpc.Trailer(&trailer))
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	if cost, ok := w.actual(method, reply, header, trailer); ok {
		_, _ = w.lim.Settle(context.WithoutCancel(ctx), r.Tenant, d, cost) // a failure leaves the estimate
	}
	return nil
}

// notSent is the status of a call the shared quota did not let through.
func notSent(ctx context.Context, d core.Decision, err error) error {
	switch {
	case d.Reason == core.ReasonCanceled && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case d.Reason == core.ReasonFailedClosed:
		return status.Errorf(codes.Unavailable, "tollgate: call not sent: the rate limit store failed: %v", err)
	case err != nil:
		return status.Errorf(codes.Internal, "tollgate: call not sent: %s: %v", d.Reason, err)
	}
	return status.Error(codes.ResourceExhausted, fmt.Sprintf("tollgate: call not sent: %s (retry after %v)", d.Reason, d.RetryAfter))
}
