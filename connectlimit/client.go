package connectlimit

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/rpcadapt"
	"google.golang.org/protobuf/proto"
)

// hint reads the retry hint of a call's error, as rpcadapt.Hint says:
// throttled only for a CodeResourceExhausted or CodeUnavailable error that
// carries a rate-limit hint (its Grpc-Retry-Pushback-Ms metadata, a
// RetryInfo or an ErrorInfo detail).
func hint(err error) (h retry.Hint, throttled bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return retry.Hint{}, false
	}
	var details []proto.Message
	for _, d := range ce.Details() {
		if m, verr := d.Value(); verr == nil {
			details = append(details, m)
		}
	}
	return rpcadapt.Hint(ce.Code(), ce.Meta().Values(rpcadapt.PushbackKey), details)
}

// clientInterceptor retries throttled unary calls.
type clientInterceptor struct{ p *retry.Policy }

// NewClientInterceptor returns a client interceptor
// (connect.WithInterceptors on a client) that retries calls the server
// throttled, as it asks: after the RetryInfo delay or
// Grpc-Retry-Pushback-Ms, plus upward jitter, within the policy's attempts
// and maximum delay (see package github.com/tollgate-go/tollgate/core/retry
// for opts and defaults: 3 attempts, 30 s). It reads the hint the same way
// over the Connect, gRPC and gRPC-Web protocols. It never retries a
// "never" answer (pushback -1, cost exceeds capacity) or an answer without
// a hint. A call whose context ends during a wait fails with
// connect.CodeCanceled or connect.CodeDeadlineExceeded; a wait that would
// outlast the deadline is not started, and the throttled answer is
// returned.
//
// A stream is retried the same way when its first Receive finds it
// throttled, before any response message: the messages sent so far (up to
// 1 MiB; protobuf messages are cloned when sent) are sent again on the new
// stream, with the same request headers, and CloseRequest repeated. Once a
// message has been received, errors are returned as they come; while a
// throttled stream waits to be retried, Send buffers instead of returning
// io.EOF. On a handler it passes every call through.
func NewClientInterceptor(opts ...retry.Option) connect.Interceptor {
	return &clientInterceptor{p: retry.New(opts...)}
}

func (c *clientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		// each attempt starts from the caller's request headers: an
		// attempt may add to them
		header := req.Header().Clone()
		for attempt := 1; ; attempt++ {
			res, err := next(ctx, req)
			if err == nil {
				return res, nil
			}
			h, throttled := hint(err)
			if !throttled {
				return res, err
			}
			d, nerr := c.p.Next(ctx, h, attempt)
			if nerr != nil {
				if cerr := ctx.Err(); cerr != nil {
					return nil, contextError(cerr)
				}
				return res, err
			}
			if werr := c.p.Wait(ctx, d); werr != nil {
				return nil, contextError(werr)
			}
			resetHeader(req.Header(), header)
		}
	}
}

func (c *clientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return newRetryConn(ctx, spec, next, c.p)
	}
}

func (c *clientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// resetHeader makes h the same as want again.
func resetHeader(h, want http.Header) {
	for k := range h {
		if _, ok := want[k]; !ok {
			delete(h, k)
		}
	}
	for k, vs := range want {
		h[k] = append([]string(nil), vs...)
	}
}

// contextError is the error of a call whose context ended.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}
