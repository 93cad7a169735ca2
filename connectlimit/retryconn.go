package connectlimit

import (
	"context"
	"errors"
	"io"
	"net/http"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/rpcadapt"
)

// retryConn retries a client stream the server throttled before its first
// response message (NewClientInterceptor).
type retryConn struct {
	*rpcadapt.Stream[connect.StreamingClientConn]
	ctx  context.Context
	spec connect.Spec
	next connect.StreamingClientFunc
	p    *retry.Policy

	header http.Header // the request headers of the first attempt, once sent; guarded by the Stream's lock
}

// newRetryConn is the retrying stream over next's first attempt.
func newRetryConn(ctx context.Context, spec connect.Spec, next connect.StreamingClientFunc, p *retry.Policy) *retryConn {
	c := &retryConn{ctx: ctx, spec: spec, next: next, p: p}
	c.Stream = rpcadapt.NewStream(next(ctx, spec), connect.StreamingClientConn.Send, connect.StreamingClientConn.CloseRequest,
		func(cc connect.StreamingClientConn) {
			if c.header == nil {
				c.header = cc.RequestHeader().Clone() // sent with the first message
			}
		})
	return c
}

func (c *retryConn) Spec() connect.Spec { return c.spec }

func (c *retryConn) Peer() connect.Peer { return c.conn().Peer() }

func (c *retryConn) RequestHeader() http.Header { return c.conn().RequestHeader() }

func (c *retryConn) ResponseHeader() http.Header { return c.conn().ResponseHeader() }

func (c *retryConn) ResponseTrailer() http.Header { return c.conn().ResponseTrailer() }

func (c *retryConn) CloseResponse() error { return c.conn().CloseResponse() }

func (c *retryConn) CloseRequest() error { return c.CloseSend() }

func (c *retryConn) Receive(m any) error {
	return c.ReceiveWith(func(cc connect.StreamingClientConn) error { return cc.Receive(m) }, c.maybeRetry)
}

// conn is the current attempt.
func (c *retryConn) conn() connect.StreamingClientConn {
	cc, _ := c.Current()
	return cc
}

// maybeRetry retries the stream if the attempt cc ended with rerr,
// throttled, and the policy allows; retried reports whether a new attempt
// is running. err is a failure of the retry itself (the context ended
// during the wait).
func (c *retryConn) maybeRetry(cc connect.StreamingClientConn, rerr error) (retried bool, err error) {
	if errors.Is(rerr, io.EOF) {
		return false, nil
	}
	h, throttled := hint(rerr)
	if !throttled {
		return false, nil
	}
	return c.Retry(c.ctx, c.p, cc, h, func() (connect.StreamingClientConn, error) {
		_ = cc.CloseResponse()
		next := c.next(c.ctx, c.spec)
		// the caller's headers; the new attempt's own protocol headers (its
		// timeout among them) stay as it set them
		rh := next.RequestHeader()
		for k, vs := range c.header {
			if _, ok := rh[k]; !ok {
				rh[k] = append([]string(nil), vs...)
			}
		}
		return next, nil
	}, contextError)
}
