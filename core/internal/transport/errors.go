package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// A failed script call's error says what failed. Only the store's own
// failures (a broken or silent connection, the limiter's timeout, a
// server-wide error reply such as OOM or LOADING) count toward a shard's
// circuit breaker. A Redis error reply about one request's keys
// (WRONGTYPE, a script error) fails that request alone. A caller whose
// context ended first is no failure at all.

// CallerGone is the error of a check whose caller's context ended before
// the store answered. It unwraps to the context's error.
type CallerGone struct{ Err error }

func (e *CallerGone) Error() string {
	return "tollgate: check abandoned, the caller's context ended first: " + e.Err.Error()
}

func (e *CallerGone) Unwrap() error { return e.Err }

// RequestError is a Redis error reply about one request's keys, or a reply
// the limiter cannot decode.
type RequestError struct{ Err error }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// ErrProtocol marks a reply the limiter cannot decode.
var ErrProtocol = errors.New("unexpected reply")

// ReplyTimeout is a command that got no reply within the store timeout:
// its socket's deadline passed, or the call's context ended before go-redis
// wrote it or read its reply. It is evidence that the store is down only
// when the shard answered nothing else since the command was handed over
// (see package shard): otherwise this process was too slow to write it or
// to read the reply (CPU starvation), and the check is shed.
type ReplyTimeout struct {
	Timeout time.Duration
	Err     error
}

func (e *ReplyTimeout) Error() string {
	return fmt.Sprintf("no reply within %v: %v", e.Timeout, e.Err)
}
func (e *ReplyTimeout) Unwrap() error { return e.Err }

// StoreError names a failed store call for what it was: shed by this
// process, the caller gone, this request's own failure, a reply that was
// not had in time, or the store's failure (a transport error, a
// server-wide error reply). ctx is the caller's own context: the limiter's
// timeouts are never in it, so a caller without a deadline can never be
// told it left.
func StoreError(ctx context.Context, timeout time.Duration, err error) error {
	var shed *ShedError
	var ne net.Error
	var op *net.OpError
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	switch {
	case errors.As(err, &shed), errors.Is(err, ErrClosed):
		return err
	case ctx.Err() != nil:
		return &CallerGone{ctx.Err()}
	case timedOut && callersDeadlinePassed(ctx):
		// the call timed out at the caller's deadline a moment before the
		// context's own timer noticed
		return &CallerGone{context.DeadlineExceeded}
	case errors.Is(err, ErrProtocol) || IsErrorReply(err):
		return &RequestError{err}
	case errors.As(err, &op) && op.Op == "dial" && !op.Timeout():
		return err // the store refused the connection: it cannot be reached
	case timedOut:
		return &ReplyTimeout{timeout, err}
	}
	return err
}

// callersDeadlinePassed reports whether the caller's own deadline has
// passed.
func callersDeadlinePassed(ctx context.Context) bool {
	cd, ok := ctx.Deadline()
	return ok && !time.Now().Before(cd)
}
