// Package guard is the check path's guard of the store: it hands each
// call to its store shard's circuit breaker (internal/shard), which judges
// the call's outcome and records the store call metrics, and answers a
// call the store did not: by the local fallback (internal/fallback) or by
// the failure policy. It never answers a shed or canceled call by either:
// those are the process's or the caller's, not the store's.
package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/internal/fallback"
	"github.com/tollgate-go/tollgate/core/internal/shard"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// Layer is the guard.
type Layer struct {
	shards   *shard.Set
	fallback *fallback.Buckets // nil: off
	closed   bool              // the failure policy: fail closed
	// wrap marks a store failure (the limiter's ErrStore)
	wrap  error
	hooks Hooks
	now   func() time.Time
	next  stack.Layer
}

// Hooks are what the guard reports to.
type Hooks struct {
	// Log logs a degraded or refused call, at most once a second.
	Log func(msg string, c stack.Call, err error, attrs ...any)
	// Shed counts a shed call, by cause.
	Shed func(ctx context.Context, cause string)
}

// New returns the guard above next: the store's shards, the local
// fallback (nil: off), the failure policy (closed: fail closed), storeErr
// the error a store failure wraps, now the limiter's clock.
func New(shards *shard.Set, fb *fallback.Buckets, closed bool, storeErr error, now func() time.Time, h Hooks, next stack.Layer) *Layer {
	return &Layer{shards: shards, fallback: fb, closed: closed, wrap: storeErr, hooks: h, now: now, next: next}
}

// Decide makes c's store call through its shard's breaker.
func (g *Layer) Decide(ctx context.Context, c stack.Call) (stack.Result, error) {
	if c.Failure != nil {
		// the failure of the call c waited for: its answer, without a call
		var why *transport.ShedError
		if errors.As(c.Failure, &why) {
			return g.shed(ctx, c, why)
		}
		return g.Degrade(c, c.Failure), c.Failure
	}
	if err := ctx.Err(); err != nil {
		return Canceled(c, err)
	}
	call, err := g.shards.Begin(ctx, c.Keys[0], c.Sent)
	if err != nil {
		err = fmt.Errorf("%w: %w", g.wrap, err)
		return g.Degrade(c, err), err
	}
	r, err := g.next.Decide(ctx, c)
	outcome, err := call.End(ctx, err, r.Wrote)
	switch outcome {
	case shard.Answered:
		if g.fallback != nil {
			g.fallback.Forget(c.Keys) // the store answers this tenant again
		}
		return r, nil
	case shard.Gone:
		return stack.Result{Verdict: stack.Canceled, Cost: c.Cost}, err
	case shard.Shed:
		return g.shed(ctx, c, err.(*transport.ShedError))
	}
	err = fmt.Errorf("%w: %w", g.wrap, err)
	switch outcome {
	case shard.Refused:
		r := g.degrade(c)
		g.hooks.Log("tollgate: the store refused this request; answered by the failure policy", c, err,
			"decision", label(r), "key", strings.Join(c.Keys, " "))
		return r, err
	case shard.Opened:
		g.hooks.Log("tollgate: circuit breaker opened: store calls paused", c, err)
	}
	return g.Degrade(c, err), err
}

// Degrade answers c without the store, which failed with err: from the
// local fallback when configured (and c has buckets), else by the failure
// policy. It logs, at most once a second: a degraded answer is never
// silent.
func (g *Layer) Degrade(c stack.Call, err error) stack.Result {
	r := g.degrade(c)
	g.hooks.Log("tollgate: rate limit check degraded", c, err, "decision", label(r))
	return r
}

// degrade is Degrade's answer, without the log.
func (g *Layer) degrade(c stack.Call) stack.Result {
	switch {
	case g.fallback != nil && c.Buckets != nil && c.Costs == nil:
		// (a mixed-cost call is answered by the policy: the fallback
		// buckets charge one cost per call)
		a := g.fallback.Take(c.Keys, c.Buckets, c.Cost, g.now())
		r := stack.Result{Verdict: stack.Verdict(a.Verdict), Buckets: stack.Balances(c.Buckets, a.Tokens),
			Binding: a.Binding, Cost: c.Cost, Fallback: true}
		if r.Verdict == stack.OverLimit {
			r.Retry = bucketmath.Duration(a.Retry)
		}
		return r
	case g.closed:
		return stack.Result{Verdict: stack.FailedClosed, Cost: c.Cost}
	}
	return stack.Result{Verdict: stack.FailedOpen, Cost: c.Cost}
}

// outcome is the decision label of the guard's own answers, for its logs.
func label(r stack.Result) string {
	switch {
	case r.Fallback:
		return "fallback"
	case r.Verdict == stack.FailedClosed:
		return "failed_closed"
	}
	return "failed_open"
}

// Canceled is the answer to a call whose caller left first.
func Canceled(c stack.Call, err error) (stack.Result, error) {
	return stack.Result{Verdict: stack.Canceled, Cost: c.Cost}, &transport.CallerGone{Err: err}
}

// shed is the answer to a call this process could not make in time: not
// admitted under any failure policy, counted by cause.
func (g *Layer) shed(ctx context.Context, c stack.Call, why *transport.ShedError) (stack.Result, error) {
	g.hooks.Shed(ctx, why.Cause)
	return stack.Result{Verdict: stack.Overloaded, Cost: c.Cost}, why
}

// bucketmath's verdicts are numbered as the stack's (a compile-time check)
var (
	_ = [1]struct{}{}[stack.OverLimit-stack.Verdict(bucketmath.OverLimit)]
	_ = [1]struct{}{}[stack.CostExceedsCapacity-stack.Verdict(bucketmath.CostExceedsCapacity)]
)
