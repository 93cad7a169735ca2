// Package transport carries a check's script call to Redis: batched into
// pipelines or one call each, bounded on the wire from its write, waiting
// in this process in a fair queue within a tenant's share and a local
// budget. It decides nothing: the limiter reads its answers and errors.
package transport

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Caller sends one check's script call: a Batcher or a Direct.
type Caller interface {
	// Do runs the script for one check of tenant and returns its reply and
	// when its command was handed to the connection, or the caller's
	// context's error, or a *ShedError, or ErrClosed, ErrStalled, or
	// go-redis's error.
	Do(ctx context.Context, tenant string, args []any) (any, time.Time, error)
	// Close waits for the calls in flight.
	Close()
}

// noRetryCmd is a script command go-redis never sends twice: not after a
// read error, and not as part of a retried pipeline, whatever the client's
// MaxRetries (go-redis honours Cmder.NoRetry for single commands and
// pipelines, on every client type). The script charges tokens: a reply lost
// after Redis ran it must be answered by the failure policy, never by
// running it again.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry reports true: see noRetryCmd.
func (noRetryCmd) NoRetry() bool { return true }

// LocalBudget is how long a check may wait in this process (in the
// Batcher's queue, for a Direct connection) before it is shed: ten store
// timeouts, at least a second. Time spent here is not the store's: a
// process short of CPU serves its queue slowly but serves it, and a store
// that stalls fails the batches ahead within the store timeout, so the
// queue moves on.
func LocalBudget(timeout time.Duration) time.Duration {
	return max(10*timeout, time.Second)
}

// Client returns the client the limiter's store calls go through, so
// that each call is bounded by the limiter's timeout from when its command
// is handed to the connection, without a goroutine per call. A standalone,
// failover, Cluster or Ring client is replaced by one built from a copy of
// its options, with the timeout as its read, write and pool timeouts and
// LocalBudget(timeout) as its dial timeout (see bound)
// (the socket's deadline is set when go-redis writes the command and when it
// starts reading the reply, so time this process spends before the write,
// or waking up to read a reply that arrived in time, is never the store's),
// ContextTimeoutEnabled set (a caller's cancellation or earlier deadline
// still ends the call) and maintenance notifications off (no background
// goroutine): its own connections, without the original's hooks, closed by
// Close (returned as owned), dialing once per attempt (no dial retries: the
// breaker paces retries). Each call's context still carries a backstop
// deadline, ctxTimeout: ten timeouts plus LocalBudget, so that go-redis's
// own loops (a Cluster's redirects and their back-off) end too; it fires
// only far past the socket deadlines. Any other implementation must honour
// context deadlines: ctxTimeout is then the timeout itself.
func Client(c redis.UniversalClient, timeout time.Duration) (sc redis.UniversalClient, owned io.Closer, ctxTimeout time.Duration) {
	backstop := 10*timeout + LocalBudget(timeout)
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch c := c.(type) {
	case *redis.Client:
		o := *c.Options()
		o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
		bound(&o.ReadTimeout, &o.WriteTimeout, &o.DialTimeout, &o.PoolTimeout, &o.DialerRetries, timeout)
		nc := redis.NewClient(&o)
		return nc, nc, backstop
	case *redis.ClusterClient:
		o := *c.Options()
		o.ContextTimeoutEnabled, o.MaintNotificationsConfig = true, off
		bound(&o.ReadTimeout, &o.WriteTimeout, &o.DialTimeout, &o.PoolTimeout, &o.DialerRetries, timeout)
		cc := redis.NewClusterClient(&o)
		return cc, cc, backstop
	case *redis.Ring:
		o := *c.Options()
		o.ContextTimeoutEnabled = true
		bound(&o.ReadTimeout, &o.WriteTimeout, &o.DialTimeout, &o.PoolTimeout, &o.DialerRetries, timeout)
		r := redis.NewRing(&o)
		return r, r, backstop
	}
	return c, nil, timeout
}

// bound sets a client's read, write and pool timeouts to timeout, its dial
// timeout to LocalBudget(timeout) and its dial attempts to one: the same
// fields on every client type's options.
//
// A dial is this process's wait for a connection, like the pool's: a store
// that is down refuses it at once, and one that is hung still completes it
// (its kernel accepts). A dial bounded by the store timeout failed only in
// a process starved of CPU, whose wake-up for the finished connect came
// after the deadline; and go-redis, after a pool's worth of failed dials,
// fails every dial at once until a background dial succeeds: every
// connection a timeout closed could then not be replaced, and every check
// failed without reaching the store.
func bound(read, write, dial, pool *time.Duration, dialRetries *int, timeout time.Duration) {
	*read, *write, *dial, *pool, *dialRetries = timeout, timeout, LocalBudget(timeout), timeout, 1
}

// ErrConnWait is a Direct check that found no connection free within its
// budget: a local condition.
var ErrConnWait = &ShedError{"connection_wait", "no connection free within its budget"}

// IsErrorReply reports whether err is a Redis error reply about the
// request's own keys: a key of the wrong type, an error raised while the
// script ran on them. Server-wide error replies (OOM, LOADING, BUSY,
// READONLY, CLUSTERDOWN, MASTERDOWN, MISCONF, NOPERM, ...) are not.
func IsErrorReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") || (strings.HasPrefix(msg, "ERR") && strings.Contains(msg, "script"))
}
