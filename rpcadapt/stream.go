package rpcadapt

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/protobuf/proto"
)

// maxReplayBytes bounds what a retried stream keeps of the messages it has
// sent, to send them again. A stream that sends more before its first
// answer is not retried.
const maxReplayBytes = 1 << 20

// Stream is the retry state of a client stream that is retried when the
// server throttles it before its first response: the current attempt, of
// the framework's stream type S, and the messages sent while the stream
// is uncommitted (up to 1 MiB; protobuf messages are cloned), to send
// again on the next attempt. It is committed once a response arrives, or
// once an answer is not retried: from then on it only passes calls
// through. Its methods are safe for concurrent use.
type Stream[S comparable] struct {
	send      func(S, any) error
	closeSend func(S) error
	sending   func(S)

	mu        sync.Mutex
	cur       S
	attempt   int
	committed bool
	sent      []any // messages sent while uncommitted, for replay
	sentBytes int
	closed    bool // CloseSend was called
	ended     bool // the current attempt ended (a send saw io.EOF), or waits to be retried
}

// NewStream is the state of a stream whose first attempt is first: send
// sends a message on an attempt, closeSend closes its sending side, and
// sending, if not nil, sees the attempt before each send and CloseSend,
// with the state locked.
func NewStream[S comparable](first S, send func(S, any) error, closeSend func(S) error, sending func(S)) *Stream[S] {
	return &Stream[S]{send: send, closeSend: closeSend, sending: sending, cur: first, attempt: 1}
}

// Current is the current attempt, and whether the stream is committed.
func (s *Stream[S]) Current() (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.committed
}

// Commit commits the stream: it is not retried any more, and drops what
// it kept.
func (s *Stream[S]) Commit() {
	s.mu.Lock()
	s.committed, s.sent = true, nil
	s.mu.Unlock()
}

// Send sends m on the current attempt, keeping it for a retry while the
// stream is uncommitted. It never holds the lock while the underlying send
// blocks (flow control), so a concurrent receive is never held up by it.
// While the attempt has ended and the stream may be retried, m is kept
// and nil returned instead of io.EOF.
func (s *Stream[S]) Send(m any) error {
	s.mu.Lock()
	cur := s.cur
	if s.sending != nil {
		s.sending(cur)
	}
	if s.committed {
		s.mu.Unlock()
		return s.send(cur, m)
	}
	size := 0
	if pm, ok := m.(proto.Message); ok {
		size = proto.Size(pm)
	}
	if s.sentBytes+size > maxReplayBytes {
		// too much to replay: this stream will not be retried
		s.committed, s.sent = true, nil
		ended := s.ended
		s.mu.Unlock()
		if ended {
			return io.EOF
		}
		return s.send(cur, m)
	}
	if pm, ok := m.(proto.Message); ok {
		s.sent = append(s.sent, proto.Clone(pm))
	} else {
		s.sent = append(s.sent, m)
	}
	s.sentBytes += size
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return nil // kept for the retry
	}
	err := s.send(cur, m)
	if errors.Is(err, io.EOF) {
		// the attempt ended; a receive learns how, and may retry (m is
		// kept for that)
		s.mu.Lock()
		committed := s.committed
		if s.cur == cur {
			s.ended = true
		}
		s.mu.Unlock()
		if committed {
			return err
		}
		return nil
	}
	return err
}

// CloseSend closes the sending side of the current attempt, and of every
// later one.
func (s *Stream[S]) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.sending != nil {
		s.sending(s.cur)
	}
	return s.closeSend(s.cur)
}

// ReceiveWith receives with recv on the current attempt. While the stream
// is uncommitted, a receive that fails is handed to retry, which retries
// the stream (Retry) if the answer asks for it: then the receive starts
// again on the new attempt. A receive that succeeds, or a failure not
// retried, commits the stream; retry's own failure is returned as is.
func (s *Stream[S]) ReceiveWith(recv func(S) error, retry func(cur S, err error) (retried bool, rerr error)) error {
	for {
		cur, committed := s.Current()
		err := recv(cur)
		if committed {
			return err
		}
		if err == nil {
			s.Commit()
			return nil
		}
		retried, rerr := retry(cur, err)
		if rerr != nil {
			return rerr
		}
		if !retried {
			s.Commit()
			return err
		}
	}
}

// Retry retries the stream after its attempt cur ended with an answer
// throttled as h says, if p allows: it waits p's delay, opens the next
// attempt with open (the state locked), and sends on it what was sent, and
// CloseSend if it was called. retried reports whether a new attempt is
// running (another goroutine's retry counts). err is a failure of the retry
// itself: the context's error, through ctxErr, when it ended before or
// during the wait, or open's or a send's error.
func (s *Stream[S]) Retry(ctx context.Context, p *retry.Policy, cur S, h retry.Hint, open func() (S, error), ctxErr func(error) error) (retried bool, err error) {
	s.mu.Lock()
	if s.cur != cur { // another goroutine retried already
		s.mu.Unlock()
		return true, nil
	}
	attempt := s.attempt
	s.ended = true // sends are kept during the wait
	s.mu.Unlock()
	d, nerr := p.Next(ctx, h, attempt)
	if nerr != nil {
		if cerr := ctx.Err(); cerr != nil {
			return false, ctxErr(cerr)
		}
		return false, nil
	}
	if werr := p.Wait(ctx, d); werr != nil {
		return false, ctxErr(werr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, oerr := open()
	if oerr != nil {
		return false, oerr
	}
	s.cur, s.attempt, s.ended = next, attempt+1, false
	for _, m := range s.sent {
		if err := s.send(next, m); err != nil {
			if errors.Is(err, io.EOF) {
				s.ended = true
				break
			}
			return false, err
		}
	}
	if s.closed {
		_ = s.closeSend(next)
	}
	return true, nil
}
