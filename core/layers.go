package core

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/fallback"
	"github.com/tollgate-go/tollgate/core/internal/shard"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The check path is a stack of layers, composed once in New: token leases
// (leaselayer.go over internal/lease), then the deny cache (denylayer.go over
// internal/denycache), then the store shard's circuit breaker
// (internal/shard) with the local fallback (internal/fallback) or the
// failure policy, then the script call, through the batcher or directly
// (scriptlayer.go over internal/transport). A layer that is off is not in the
// stack. A check goes down the stack once, each layer answering it or
// handing it to the next, and its decision comes back up once. The
// internal packages own each feature's state, option value, reset and
// decision logic; this package only states their answers as Decisions.

// layer is one step of the check path.
type layer interface {
	decide(ctx context.Context, c checkCall) (Decision, error)
}

// checkCall is one resolved check on its way down the stack. It is passed
// by value: a layer that changes it (a lease's charge) changes its own copy.
type checkCall struct {
	req     Request
	keys    []string // the buckets' keys, in the order of buckets
	buckets []quota.Bucket
	// cost is the number of tokens to charge in the store: req.Cost, or a
	// lease's size (the answer is still stated for req.Cost)
	cost int64
	// costs, when not nil, is each bucket's cost, in the order of buckets (a
	// request whose AlsoCosts differ from its Cost): the script charges
	// each bucket its own, and cost is unused. Only the store answers it.
	costs []int64
	sent  time.Time // when the check started, on the limiter's clock
	// slot, when not nil, is the bucket with a concurrency limit: the call
	// is the concurrency script's, and an admission takes a slot
	slot *slotCall
}

// stack composes the check path from the limiter's settings: the script
// call at the bottom, the circuit breaker and fallback above it, then the
// deny cache and leases when they are on.
func (l *Limiter) stack() layer {
	var top layer = l.path.breaker
	if l.path.deny != nil {
		top = &denyLayer{cache: l.path.deny, metrics: l.metrics, next: top}
	}
	if l.path.leases != nil {
		top = &leaseLayer{l: l, leases: l.path.leases, next: top}
	}
	return top
}

// breakerLayer hands each check to its store shard's circuit breaker
// (internal/shard), which judges the call's outcome and records the store
// call metrics, and answers a check the store did not: by the local
// fallback (internal/fallback) or the failure policy.
type breakerLayer struct {
	shards   *shard.Set
	fallback *fallback.Buckets // nil: off
	policy   FailurePolicy
	metrics  *metrics
	log      func(msg string, req Request, err error, attrs ...any)
	now      func() time.Time
	script   *scriptLayer
}

func (bl *breakerLayer) decide(ctx context.Context, c checkCall) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return canceled(c.req, err)
	}
	call, err := bl.shards.Begin(ctx, c.keys[0], c.sent)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrStore, err)
		return bl.degrade(c.req, c.keys, c.buckets, err), err
	}
	d, wrote, err := bl.script.call(ctx, &c)
	outcome, err := call.End(ctx, err, wrote)
	switch outcome {
	case shard.Answered:
		if bl.fallback != nil {
			bl.fallback.Forget(c.keys) // the store answers this tenant again
		}
		return d, nil
	case shard.Gone:
		return Decision{Reason: ReasonCanceled, Cost: c.req.Cost}, err
	case shard.Shed:
		return shed(ctx, bl.metrics, c.req, err.(*transport.ShedError))
	}
	err = fmt.Errorf("%w: %w", ErrStore, err)
	switch outcome {
	case shard.Refused:
		d := bl.degradeQuiet(c.req, c.keys, c.buckets)
		bl.log("tollgate: the store refused this request; answered by the failure policy", c.req, err,
			"decision", outcomeLabel(d), "key", strings.Join(c.keys, " "))
		return d, err
	case shard.Opened:
		bl.log("tollgate: circuit breaker opened: store calls paused", c.req, err)
	}
	return bl.degrade(c.req, c.keys, c.buckets, err), err
}

// degrade answers without the store: from the local fallback when
// configured (and the quota is known), else by the failure policy. It
// logs, at most once a second: a degraded decision is never silent.
func (bl *breakerLayer) degrade(req Request, keys []string, buckets []quota.Bucket, err error) Decision {
	d := bl.degradeQuiet(req, keys, buckets)
	bl.log("tollgate: rate limit check degraded", req, err, "decision", outcomeLabel(d))
	return d
}

// degradeQuiet is degrade's answer, without the log.
func (bl *breakerLayer) degradeQuiet(req Request, keys []string, buckets []quota.Bucket) Decision {
	switch {
	case bl.fallback != nil && buckets != nil && !req.mixed():
		// (a mixed-cost request is answered by the policy: the fallback
		// buckets charge one cost per call)
		a := bl.fallback.Take(keys, buckets, req.Cost, bl.now())
		states := make([]BucketState, len(buckets))
		for i, b := range buckets {
			states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: a.Tokens[i]}
		}
		d := newDecision(states, a.Binding, Reason(a.Verdict), a.Retry, req.Cost)
		d.Fallback = true
		return d
	case bl.policy == FailClosed:
		return Decision{Reason: ReasonFailedClosed, Cost: req.Cost}
	}
	return Decision{Reason: ReasonFailedOpen, Allowed: true, Cost: req.Cost}
}

// canceled is the decision of a check whose caller left first.
func canceled(req Request, err error) (Decision, error) {
	return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &transport.CallerGone{Err: err}
}

// shed is the answer to a check this process could not make in time: not
// admitted under any failure policy, counted by cause.
func shed(ctx context.Context, m *metrics, req Request, why *transport.ShedError) (Decision, error) {
	m.shedCheck(ctx, why)
	return Decision{Reason: ReasonOverloaded, Cost: req.Cost}, why
}
