package connectlimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/protobuf/proto"
)

// maxReplayBytes bounds what a retried stream keeps of the messages it has
// sent, to send them again. A stream that sends more before its first
// answer is not retried.
const maxReplayBytes = 1 << 20

// retryConn retries a client stream the server throttled before its first
// response message (NewClientInterceptor).
type retryConn struct {
	connect.StreamingClientConn // the current attempt; guarded by mu once retries start
	ctx                         context.Context
	spec                        connect.Spec
	next                        connect.StreamingClientFunc
	p                           *retry.Policy

	mu        sync.Mutex
	attempt   int
	header    http.Header // the request headers of the first attempt, once sent
	committed bool
	sent      []any // messages sent while uncommitted, for replay
	sentBytes int
	closed    bool // CloseRequest was called
	ended     bool // the current attempt ended (Send saw io.EOF)
}

func (c *retryConn) current() (connect.StreamingClientConn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.StreamingClientConn, c.committed
}

func (c *retryConn) commit() {
	c.mu.Lock()
	c.committed, c.sent = true, nil
	c.mu.Unlock()
}

func (c *retryConn) RequestHeader() http.Header {
	cc, _ := c.current()
	return cc.RequestHeader()
}

func (c *retryConn) ResponseHeader() http.Header {
	cc, _ := c.current()
	return cc.ResponseHeader()
}

func (c *retryConn) ResponseTrailer() http.Header {
	cc, _ := c.current()
	return cc.ResponseTrailer()
}

func (c *retryConn) CloseResponse() error {
	cc, _ := c.current()
	return cc.CloseResponse()
}

// Send never holds the lock while the underlying Send blocks (flow
// control), so a concurrent Receive is never held up by it.
func (c *retryConn) Send(m any) error {
	c.mu.Lock()
	cc := c.StreamingClientConn
	if c.header == nil {
		c.header = cc.RequestHeader().Clone() // sent with the first message
	}
	if c.committed {
		c.mu.Unlock()
		return cc.Send(m)
	}
	size := 0
	if pm, ok := m.(proto.Message); ok {
		size = proto.Size(pm)
	}
	if c.sentBytes+size > maxReplayBytes {
		// too much to replay: this stream will not be retried
		c.committed, c.sent = true, nil
		ended := c.ended
		c.mu.Unlock()
		if ended {
			return io.EOF
		}
		return cc.Send(m)
	}
	if pm, ok := m.(proto.Message); ok {
		c.sent = append(c.sent, proto.Clone(pm))
	} else {
		c.sent = append(c.sent, m)
	}
	c.sentBytes += size
	ended := c.ended
	c.mu.Unlock()
	if ended {
		return nil // buffered for the retry
	}
	err := cc.Send(m)
	if errors.Is(err, io.EOF) {
		// the attempt ended; Receive learns how, and may retry (m is
		// buffered for that)
		c.mu.Lock()
		committed := c.committed
		if c.StreamingClientConn == cc {
			c.ended = true
		}
		c.mu.Unlock()
		if committed {
			return err
		}
		return nil
	}
	return err
}

func (c *retryConn) CloseRequest() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.header == nil {
		c.header = c.StreamingClientConn.RequestHeader().Clone()
	}
	return c.StreamingClientConn.CloseRequest()
}

func (c *retryConn) Receive(m any) error {
	for {
		cc, committed := c.current()
		err := cc.Receive(m)
		if committed {
			return err
		}
		if err == nil {
			c.commit()
			return nil
		}
		retried, rerr := c.maybeRetry(cc, err)
		if rerr != nil {
			return rerr
		}
		if !retried {
			c.commit()
			return err
		}
	}
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
	c.mu.Lock()
	if c.StreamingClientConn != cc { // another goroutine retried already
		c.mu.Unlock()
		return true, nil
	}
	attempt := c.attempt
	c.ended = true // sends buffer during the wait
	c.mu.Unlock()
	d, nerr := c.p.Next(c.ctx, h, attempt)
	if nerr != nil {
		if cerr := c.ctx.Err(); cerr != nil {
			return false, contextError(cerr)
		}
		return false, nil
	}
	if werr := c.p.Wait(c.ctx, d); werr != nil {
		return false, contextError(werr)
	}
	_ = cc.CloseResponse()
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.next(c.ctx, c.spec)
	// the caller's headers; the new attempt's own protocol headers (its
	// timeout among them) stay as it set them
	rh := next.RequestHeader()
	for k, vs := range c.header {
		if _, ok := rh[k]; !ok {
			rh[k] = append([]string(nil), vs...)
		}
	}
	c.StreamingClientConn, c.attempt, c.ended = next, attempt+1, false
	for _, m := range c.sent {
		if err := next.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				c.ended = true
				break
			}
			return false, err
		}
	}
	if c.closed {
		_ = next.CloseRequest()
	}
	return true, nil
}
