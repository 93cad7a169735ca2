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
// that each call is bounded by the limiter's timeout without a goroutine
// per call. A client that honours context deadlines
// (ContextTimeoutEnabled) is used as is. A standalone, failover, Cluster or
// Ring client that does not is replaced by one built from a copy of its
// options with ContextTimeoutEnabled set (and maintenance notifications
// off, so that it runs no background goroutine): its own connections,
// without the original's hooks, closed by Close (returned as owned). Any
// other implementation must honour context deadlines.
func scriptClient(c redis.UniversalClient) (sc redis.UniversalClient, owned io.Closer) {
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch c := c.(type) {
	case *redis.Client:
		if o := *c.Options(); !o.ContextTimeoutEnabled {
			o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
			nc := redis.NewClient(&o)
			return nc, nc
		}
	case *redis.ClusterClient:
		if o := *c.Options(); !o.ContextTimeoutEnabled {
			o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
			cc := redis.NewClusterClient(&o)
			return cc, cc
		}
	case *redis.Ring:
		if o := *c.Options(); !o.ContextTimeoutEnabled {
			o.ContextTimeoutEnabled = true
			r := redis.NewRing(&o)
			return r, r
		}
	}
	return c, nil
}

// errLimiterTimeout is the cause of a store call's context when the
// limiter's own timeout fired (not the caller's deadline).
var errLimiterTimeout = errors.New("tollgate: store timeout")

// callerGone is the error of a check whose caller's context ended before
// the store answered (and before the limiter's own timeout fired). It
// unwraps to the context's error.
type callerGone struct{ err error }

func (e *callerGone) Error() string {
	return "tollgate: check abandoned, the caller's context ended first: " + e.err.Error()
}

func (e *callerGone) Unwrap() error { return e.err }

// requestError is a Redis error reply about one request's keys.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// storeError names a failed store call for what it was: the caller gone,
// the limiter's timeout, this request's own failure, or the store's. ctx is
// the caller's context, call the call's (ctx bounded by the timeout).
func storeError(ctx, call context.Context, timeout time.Duration, err error) error {
	var ne net.Error
	switch {
	case context.Cause(call) == errLimiterTimeout:
		return fmt.Errorf("no answer within %v: %w", timeout, context.DeadlineExceeded)
	case ctx.Err() != nil:
		return &callerGone{ctx.Err()}
	case callersDeadlinePassed(ctx, call):
		// the socket timed out at the caller's deadline a moment before the
		// context's own timer noticed
		return &callerGone{context.DeadlineExceeded}
	case errors.As(err, &ne) && ne.Timeout():
		// the socket timed out at the call's deadline, which is the
		// limiter's
		return fmt.Errorf("no answer within %v: %w", timeout, err)
	case isRequestError(err):
		return &requestError{err}
	}
	return err
}

// callersDeadlinePassed reports whether the call's deadline is the caller's
// and has passed.
func callersDeadlinePassed(ctx, call context.Context) bool {
	cd, ok := ctx.Deadline()
	if !ok {
		return false
	}
	d, _ := call.Deadline()
	return !d.Before(cd) && !time.Now().Before(cd)
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
