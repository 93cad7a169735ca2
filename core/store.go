package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// The store boundary: how a script call is sent (once, bounded) and how its
// failure is told apart. Only the store's own failures (a broken or silent
// connection, the limiter's timeout, a server-wide error reply such as OOM
// or LOADING) count toward the circuit breaker. A Redis error reply about
// one request's keys (WRONGTYPE, a script error) fails that request alone.
// A caller whose context ended first is no failure at all.

// callerGone is the error of a check whose caller's context ended before
// the store answered. It unwraps to the context's error.
type callerGone struct{ err error }

func (e *callerGone) Error() string {
	return "tollgate: check abandoned, the caller's context ended first: " + e.err.Error()
}

func (e *callerGone) Unwrap() error { return e.err }

// requestError is a Redis error reply about one request's keys.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// replyTimeout is a command that got no reply within the store timeout:
// its socket's deadline passed, or the call's context ended before go-redis
// wrote it or read its reply. It is evidence that the store is down only
// when the shard answered nothing else since the command was handed over
// (see shard): otherwise this process was too slow to write it or to read
// the reply (CPU starvation), and the check is shed.
type replyTimeout struct {
	timeout time.Duration
	err     error
}

func (e *replyTimeout) Error() string {
	return fmt.Sprintf("no reply within %v: %v", e.timeout, e.err)
}
func (e *replyTimeout) Unwrap() error { return e.err }

// storeError names a failed store call for what it was: shed by this
// process, the caller gone, this request's own failure, a reply that was
// not had in time, or the store's failure (a transport error, a
// server-wide error reply). ctx is
// the caller's own context: the limiter's timeouts are never in it, so a
// caller without a deadline can never be told it left.
func storeError(ctx context.Context, timeout time.Duration, err error) error {
	var shed *transport.ShedError
	var ne net.Error
	var op *net.OpError
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	switch {
	case errors.As(err, &shed), errors.Is(err, transport.ErrClosed):
		return err
	case ctx.Err() != nil:
		return &callerGone{ctx.Err()}
	case timedOut && callersDeadlinePassed(ctx):
		// the call timed out at the caller's deadline a moment before the
		// context's own timer noticed
		return &callerGone{context.DeadlineExceeded}
	case isRequestError(err):
		return &requestError{err}
	case errors.As(err, &op) && op.Op == "dial" && !op.Timeout():
		return err // the store refused the connection: it cannot be reached
	case timedOut:
		return &replyTimeout{timeout, err}
	}
	return err
}

// callersDeadlinePassed reports whether the caller's own deadline has
// passed.
func callersDeadlinePassed(ctx context.Context) bool {
	cd, ok := ctx.Deadline()
	return ok && !time.Now().Before(cd)
}

// isRequestError reports whether err is about the request's own keys: an
// error reply about them (see transport.IsErrorReply) or a reply the
// limiter cannot decode.
func isRequestError(err error) bool {
	return errors.Is(err, errProtocol) || transport.IsErrorReply(err)
}
