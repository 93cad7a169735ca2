package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WaitOption configures WaitUnaryClientInterceptor. A nil option is
// skipped; an option given a value it cannot use panics in
// WaitUnaryClientInterceptor.
type WaitOption interface{ applyWait(*waiter) error }

type waitOptionFunc func(*waiter) error

func (f waitOptionFunc) applyWait(w *waiter) error { return f(w) }

// WithActualCost sets how a call's answer reports what it really cost
// (header or trailer metadata an upstream sets, or the reply itself): ok
// true settles the call's reservation to that cost (core.Limiter.Settle)
// once the call has returned without error. Default: none, the estimate
// stands. nil is an error.
func WithActualCost(f func(fullMethod string, reply any, header, trailer metadata.MD) (cost int64, ok bool)) WaitOption {
	return waitOptionFunc(func(w *waiter) error {
		if f == nil {
			return errors.New("WithActualCost: nil function")
		}
		w.actual = f
		return nil
	})
}

// WithSettleErrorHandler sets a hook called with the error of a settle
// that failed (the store, or a request core.Limiter.Settle refuses: one
// with AlsoCosts). The call's result is returned all the same. Default:
// none (core logs store failures). nil is an error.
func WithSettleErrorHandler(f func(ctx context.Context, fullMethod string, err error)) WaitOption {
	return waitOptionFunc(func(w *waiter) error {
		if f == nil {
			return errors.New("WithSettleErrorHandler: nil function")
		}
		w.settleErr = f
		return nil
	})
}

type waiter struct {
	lim       *core.Limiter
	request   func(ctx context.Context, fullMethod string, req any) core.Request
	actual    func(string, any, metadata.MD, metadata.MD) (int64, bool)
	settleErr func(context.Context, string, error)
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
// Unavailable. A call the store fails open is sent at once. With
// WithActualCost the reservation is settled from the answer.
//
// A nil limiter or request function, or an option given a value it cannot
// use, panics here.
func WaitUnaryClientInterceptor(lim *core.Limiter, request func(ctx context.Context, fullMethod string, req any) core.Request, opts ...WaitOption) grpc.UnaryClientInterceptor {
	if lim == nil {
		panic("tollgate: grpclimit.WaitUnaryClientInterceptor: nil limiter")
	}
	if request == nil {
		panic("tollgate: grpclimit.WaitUnaryClientInterceptor: nil request function")
	}
	w := &waiter{lim: lim, request: request}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyWait(w); err != nil {
			panic("tollgate: grpclimit.WaitUnaryClientInterceptor: " + err.Error())
		}
	}
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
		if _, serr := w.lim.Settle(context.WithoutCancel(ctx), r.Tenant, d, cost); serr != nil && w.settleErr != nil {
			w.settleErr(ctx, method, serr)
		}
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
