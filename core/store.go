package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The store boundary: how a script call is sent (once, bounded) and how its
// failure is told apart. Only the store's own failures (a broken or silent
// connection, the limiter's timeout, a server-wide error reply such as OOM
// or LOADING) count toward the circuit breaker. A Redis error reply about
// one request's keys (WRONGTYPE, a script error) fails that request alone.
// A caller whose context ended first is no failure at all.

// noRetryCmd is a script command go-redis never sends twice: not after a
// read error, and not as part of a retried pipeline, whatever the client's
// MaxRetries (go-redis honours Cmder.NoRetry for single commands and
// pipelines, on every client type). The script charges tokens: a reply lost
// after Redis ran it must be answered by the failure policy, never by
// running it again.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry reports true: see noRetryCmd.
func (noRetryCmd) NoRetry() bool { return true }

// scriptClient returns the client the limiter's store calls go through, so
// that each call is bounded by the limiter's timeout from when its command
// is handed to the connection, without a goroutine per call. A standalone,
// failover, Cluster or Ring client is replaced by one built from a copy of
// its options, with the timeout as its read, write, dial and pool timeouts
// (the socket's deadline is set when go-redis writes the command and when it
// starts reading the reply, so time this process spends before the write,
// or waking up to read a reply that arrived in time, is never the store's),
// ContextTimeoutEnabled set (a caller's cancellation or earlier deadline
// still ends the call) and maintenance notifications off (no background
// goroutine): its own connections, without the original's hooks, closed by
// Close (returned as owned), dialing once per attempt (no dial retries: the
// breaker paces retries). Each call's context still carries a backstop
// deadline, ctxTimeout: ten timeouts plus localBudget, so that go-redis's
// own loops (a Cluster's redirects and their back-off) end too; it fires
// only far past the socket deadlines. Any other implementation must honour context
// deadlines: ctxTimeout is then the timeout itself.
func scriptClient(c redis.UniversalClient, timeout time.Duration) (sc redis.UniversalClient, owned io.Closer, ctxTimeout time.Duration) {
	backstop := 10*timeout + localBudget(timeout)
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch c := c.(type) {
	case *redis.Client:
		o := *c.Options()
		o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
		o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.DialerRetries = 1
		nc := redis.NewClient(&o)
		return nc, nc, backstop
	case *redis.ClusterClient:
		o := *c.Options()
		o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
		o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.DialerRetries = 1
		cc := redis.NewClusterClient(&o)
		return cc, cc, backstop
	case *redis.Ring:
		o := *c.Options()
		o.ContextTimeoutEnabled = true
		o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.DialerRetries = 1
		r := redis.NewRing(&o)
		return r, r, backstop
	}
	return c, nil, timeout
}

// withCallTimeout bounds a call's context by d (see scriptClient).
func withCallTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

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

// errConnWait is a direct check that found no connection free within the
// timeout: a local condition.
var errConnWait = &shedError{"connection_wait", "no connection free within its budget"}

// storeError names a failed store call for what it was: shed by this
// process, the caller gone, this request's own failure, a reply that was
// not had in time, or the store's failure (a transport error, a
// server-wide error reply). ctx is
// the caller's own context: the limiter's timeouts are never in it, so a
// caller without a deadline can never be told it left.
func storeError(ctx context.Context, timeout time.Duration, err error) error {
	var shed *shedError
	var ne net.Error
	var op *net.OpError
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	switch {
	case errors.As(err, &shed), errors.Is(err, errClosed):
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

// isRequestError reports whether err is about the request's own keys: a
// key of the wrong type, an error raised while the script ran on them, or a
// reply the limiter cannot decode. Server-wide error replies (OOM, LOADING,
// BUSY, READONLY, CLUSTERDOWN, MASTERDOWN, MISCONF, NOPERM, ...) are not.
func isRequestError(err error) bool {
	if errors.Is(err, errProtocol) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") || (strings.HasPrefix(msg, "ERR") && strings.Contains(msg, "script"))
}
