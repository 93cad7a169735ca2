package grpclimit

import (
	"context"
	"errors"
	"io"

	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/rpcadapt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// hint reads the retry hint of a call's error and trailer metadata, as
// rpcadapt.Hint says: throttled only for a ResourceExhausted or
// Unavailable status that carries a rate-limit hint.
func hint(err error, trailer metadata.MD) (h retry.Hint, throttled bool) {
	st, ok := status.FromError(err)
	if !ok {
		return retry.Hint{}, false
	}
	var details []proto.Message
	for _, d := range st.Details() {
		if m, ok := d.(protoadapt.MessageV1); ok {
			details = append(details, protoadapt.MessageV2Of(m))
		}
	}
	return rpcadapt.Hint(st.Code(), trailer.Get(rpcadapt.PushbackKey), details)
}

// transportHeader are the header fields a server's transport sends on its
// own, which say nothing about the call (see answered).
var transportHeader = map[string]bool{"content-type": true, "date": true, "grpc-encoding": true, "grpc-accept-encoding": true}

// answered reports whether a call's header metadata says the server had
// started to answer: any field but the transport's own.
func answered(header metadata.MD) bool {
	for k := range header {
		if !transportHeader[k] {
			return true
		}
	}
	return false
}

// UnaryClientInterceptor retries calls the server throttled, as it asks:
// after the RetryInfo delay or grpc-retry-pushback-ms, plus upward jitter,
// within the policy's attempts and maximum delay (see package
// github.com/tollgate-go/tollgate/core/retry for opts and defaults: 3
// attempts, 30 s). It never retries a "never" answer (pushback -1, cost
// exceeds capacity), an answer without a hint, or an answer whose header
// carried metadata (the server had started to answer). A header with only
// the transport's own fields (content-type, date, grpc-encoding,
// grpc-accept-encoding) counts as none: servers on net/http, such as
// connect-go's, cannot send a Trailers-Only response. A call whose context
// ends during a wait fails with the context's status (Canceled or
// DeadlineExceeded); a wait that would outlast the deadline is not
// started.
//
// Use it instead of, not beside, a service-config retryPolicy for
// RESOURCE_EXHAUSTED: both would retry.
func UnaryClientInterceptor(opts ...retry.Option) grpc.UnaryClientInterceptor {
	p := retry.New(opts...)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		var header, trailer metadata.MD
		callOpts = append(callOpts[:len(callOpts):len(callOpts)], grpc.Header(&header), grpc.Trailer(&trailer))
		for attempt := 1; ; attempt++ {
			header, trailer = nil, nil
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil || answered(header) {
				return err
			}
			h, throttled := hint(err, trailer)
			if !throttled {
				return err
			}
			d, nerr := p.Next(ctx, h, attempt)
			if nerr != nil {
				if cerr := ctx.Err(); cerr != nil {
					return status.FromContextError(cerr).Err()
				}
				return err
			}
			if werr := p.Wait(ctx, d); werr != nil {
				return status.FromContextError(werr).Err()
			}
		}
	}
}

// StreamClientInterceptor retries streams the server throttled when they
// opened, as [UnaryClientInterceptor] retries calls. A throttled stream is
// detected on the first RecvMsg (or Header) while the stream is still
// uncommitted: no response message or header received yet, and the answer
// Trailers-Only. The messages sent so far (up to 1 MiB; protobuf
// messages are cloned when sent) are sent again on the new stream, and
// CloseSend repeated. Once the stream is committed, errors are returned
// as they come.
//
// While a throttled stream waits to be retried, SendMsg buffers instead
// of returning io.EOF.
func StreamClientInterceptor(opts ...retry.Option) grpc.StreamClientInterceptor {
	p := retry.New(opts...)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			return nil, err
		}
		return &retryStream{Stream: rpcadapt.NewStream(cs, grpc.ClientStream.SendMsg, grpc.ClientStream.CloseSend, nil),
			ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, callOpts: callOpts, p: p}, nil
	}
}

// retryStream retries a stream the server throttled when it opened
// (StreamClientInterceptor).
type retryStream struct {
	*rpcadapt.Stream[grpc.ClientStream]
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	callOpts []grpc.CallOption
	p        *retry.Policy
}

func (s *retryStream) Context() context.Context {
	cs, _ := s.Current()
	return cs.Context()
}

func (s *retryStream) Trailer() metadata.MD {
	cs, _ := s.Current()
	return cs.Trailer()
}

func (s *retryStream) SendMsg(m any) error { return s.Send(m) }

func (s *retryStream) Header() (metadata.MD, error) {
	for {
		cs, committed := s.Current()
		md, err := cs.Header()
		if committed {
			return md, err
		}
		if md != nil {
			s.Commit()
			return md, err
		}
		// Trailers-Only: the attempt ended without a message, so receiving
		// (into nil: nothing is decoded) only reads its status.
		if retried, rerr := s.maybeRetry(cs, cs.RecvMsg(nil)); rerr != nil || !retried {
			return nil, rerr
		}
	}
}

func (s *retryStream) RecvMsg(m any) error {
	return s.ReceiveWith(func(cs grpc.ClientStream) error { return cs.RecvMsg(m) }, s.maybeRetry)
}

// maybeRetry retries the stream if the attempt cs ended with rerr,
// throttled and Trailers-Only, and the policy allows; retried reports
// whether a new attempt is running. err is a failure of the retry itself
// (the context ended during the wait, or no new stream could be created).
func (s *retryStream) maybeRetry(cs grpc.ClientStream, rerr error) (retried bool, err error) {
	if rerr == nil || errors.Is(rerr, io.EOF) {
		return false, nil
	}
	if md, _ := cs.Header(); md != nil { // the server had started to answer
		return false, nil
	}
	h, throttled := hint(rerr, cs.Trailer())
	if !throttled {
		return false, nil
	}
	return s.Retry(s.ctx, s.p, cs, h, func() (grpc.ClientStream, error) {
		return s.streamer(s.ctx, s.desc, s.cc, s.method, s.callOpts...)
	}, func(err error) error { return status.FromContextError(err).Err() })
}
