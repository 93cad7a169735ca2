package core

import (
	"math"
	"time"
	"unsafe"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Reason says why a Decision came out as it did.
type Reason uint8

// Reasons. The zero value is ReasonOK.
const (
	// ReasonOK: every bucket had enough tokens; the request was charged.
	ReasonOK Reason = iota
	// ReasonOverLimit: a bucket had fewer tokens than the cost. Nothing was
	// charged; RetryAfter says when the request could be admitted.
	ReasonOverLimit
	// ReasonCostExceedsCapacity: the cost is larger than a bucket's
	// capacity, so the request can never be admitted. Nothing was charged
	// and there is no retry hint.
	ReasonCostExceedsCapacity
	// ReasonFailedOpen: the store failed and the limiter's policy let the
	// request through unchecked.
	ReasonFailedOpen
	// ReasonFailedClosed: the store failed and the limiter's policy rejected
	// the request (HTTP 503, gRPC Unavailable; never 429).
	ReasonFailedClosed
	// ReasonShadowDenied: the request would have been denied, but the
	// limiter runs in shadow (dry-run) mode, so it was let through.
	ReasonShadowDenied
	// ReasonInvalid: the request could not be keyed or charged (an empty
	// or over-long tenant ID, a negative cost). Nothing was charged.
	ReasonInvalid
	// ReasonUnresolved: no valid quota is configured for the request (an
	// unknown tier or class, an invalid quota). It is rejected (HTTP 500,
	// gRPC Internal): a configuration mistake must not mean unlimited.
	ReasonUnresolved
	// ReasonCanceled: the caller's context ended (cancelled, or its deadline
	// passed) before the store answered. The caller is gone, so the request
	// does not proceed; this is not a store failure and not degraded. Check's
	// error wraps the context's error (context.Canceled or
	// context.DeadlineExceeded). The request may or may not have been charged.
	ReasonCanceled
	// ReasonOverloaded: this process could not check the request in time
	// (its tenant's share of the pending queue was full, the check waited
	// in the queue or for a connection longer than the timeout, or its
	// reply came late while the store kept answering other checks). The
	// store is not at fault, so the failure policy does not apply: under
	// every policy the request is shed (HTTP 503 with Retry-After, gRPC
	// Unavailable with pushback), never admitted unchecked. Check's error
	// wraps ErrOverloaded. The request may have been charged only when its
	// reply came late.
	ReasonOverloaded
	// ReasonConcurrencyLimit: every bucket had the tokens, but the bucket
	// with a concurrency limit (Quota.Concurrency) had every slot taken by
	// requests of the tenant still in flight. Nothing was charged; RetryAfter
	// is the limiter's hint (WithConcurrencySlots), at most the time until
	// the earliest slot's deadline. HTTP 429, gRPC ResourceExhausted.
	ReasonConcurrencyLimit
)

var reasonNames = [...]string{"ok", "over_limit", "cost_exceeds_capacity", "failed_open", "failed_closed", "shadow_denied", "invalid", "unresolved", "canceled", "overloaded", "concurrency_limit"}

// String returns the reason's stable snake_case name, used in metrics and logs.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// BucketState is one bucket's state after a check.
type BucketState struct {
	Name  string
	Quota quota.Quota
	// Tokens is the balance after this check, fractional.
	Tokens float64
	// Stamp is the time the store keeps with the balance, to the
	// microsecond: after an admission (or a peek) by the store, the time of
	// the bucket's last charge by the store's clock (the Redis server's, or
	// WithClock's in client-clock mode); it never moves backwards. Zero on
	// a denial and on a decision made without the store (lease, deny cache,
	// local fallback).
	Stamp time.Time
	// InFlight is, for a bucket with a concurrency limit, the number of its
	// slots in use after this check, across the fleet (this request's
	// included when it took one); 0 for other buckets.
	InFlight int64
}

// Remaining is b's balance rounded down, never negative: a decision's
// Remaining, and what each bucket of it has left.
func (b BucketState) Remaining() int64 {
	if r := math.Floor(b.Tokens); r > 0 {
		return int64(r)
	}
	return 0
}

// ResetAfter is how long until b is full again at its refill rate: a
// decision's ResetAfter, and each bucket's.
func (b BucketState) ResetAfter() time.Duration {
	return bucketmath.Duration((float64(b.Quota.Capacity) - b.Tokens) / b.Quota.RefillPerSecond)
}

// Decision is the limiter's answer to one request. Every number an adapter
// renders (headers, status, body, gRPC details) is derived from it by
// package render, so every adapter renders the same answer.
type Decision struct {
	// Allowed reports whether the request may proceed. It is true for
	// ReasonOK, ReasonFailedOpen and ReasonShadowDenied.
	Allowed bool
	Reason  Reason
	// Bucket names the binding bucket: the one that denied the request, or
	// when it was admitted, the one left with the fewest tokens.
	Bucket string
	// Quota is the binding bucket's quota.
	Quota quota.Quota
	// Limit is the binding bucket's capacity.
	Limit int64
	// Remaining is the binding bucket's balance after this check, rounded
	// down, never negative.
	Remaining int64
	// Tokens is the binding bucket's exact balance after this check.
	Tokens float64
	// RetryAfter is how long until the request could be admitted: zero
	// when allowed, and zero for ReasonCostExceedsCapacity (never).
	RetryAfter time.Duration
	// ResetAfter is how long until the binding bucket is full again.
	ResetAfter time.Duration
	// Cost is the request's cost, in tokens: what the binding bucket was
	// charged or judged by. For a request with AlsoCosts that is the cost
	// of the class the binding bucket belongs to (the largest, for a bucket
	// two classes share).
	Cost int64
	// Buckets holds every bucket checked, in the resolver's order.
	Buckets []BucketState
	// Fallback is set when the store failed and the decision was made by
	// the local fallback buckets (WithLocalFallback).
	Fallback bool
	// Local is set when the deny cache answered without a store call
	// (WithDenyCache).
	Local bool
	// Slot is the concurrency slot the request holds when it was admitted
	// by the store and one of its buckets has a concurrency limit; nil
	// otherwise. The caller must release it when the request ends (a
	// Gate's Verdict.Done does); until then it is renewed in the background.
	Slot *Slot
	// mixedCosts: the store charged the buckets different costs (a request
	// with AlsoCosts): Settle cannot settle it by one difference.
	mixedCosts bool
	// class and also are the request's classes (Request.Class, Also):
	// Settle resolves their buckets' quotas as they are when it runs.
	class string
	also  []string
	// reservation names a settleable admission in the store: its limiter's
	// id (limiterID) and a number; admitted is when it was made, in Unix
	// nanoseconds of this host's clock (the settle window is real time, as
	// the mark's life in the store is, whatever clock the limiter reads).
	// Settle marks it settled under that name for the settle window
	// (WithSettleWindow).
	limiterID   string
	reservation uint64
	admitted    int64
}

// Degraded reports whether the decision was made without the store because
// it failed (failure policy or local fallback).
func (d Decision) Degraded() bool {
	return d.Reason == ReasonFailedOpen || d.Reason == ReasonFailedClosed || d.Fallback
}

// Denied reports whether the request was rejected by a bucket (over limit or
// never satisfiable), as opposed to allowed or failed.
func (d Decision) Denied() bool {
	return d.Reason == ReasonOverLimit || d.Reason == ReasonCostExceedsCapacity || d.Reason == ReasonConcurrencyLimit
}

// answer is the Decision of req stated by the stack's result r: the one
// place a result becomes a Decision. An admission that took a concurrency
// slot is held from here on (Decision.Slot).
func (l *Limiter) answer(req *Request, c *stack.Call, r stack.Result) Decision {
	reason := Reason(r.Verdict)
	d := Decision{Allowed: reason == ReasonOK || reason == ReasonFailedOpen, Reason: reason, Cost: r.Cost,
		Fallback: r.Fallback, Local: r.Local, class: req.Class, also: req.Also}
	if len(r.Buckets) > 0 {
		// stack.Bucket is BucketState field for field (checked below, at
		// compile time): the states are the decision's, not copied
		states := unsafe.Slice((*BucketState)(unsafe.Pointer(unsafe.SliceData(r.Buckets))), len(r.Buckets))
		b := states[r.Binding]
		d.Bucket, d.Quota, d.Limit, d.Tokens, d.Buckets = b.Name, b.Quota, b.Quota.Capacity, b.Tokens, states
		d.Remaining, d.ResetAfter, d.RetryAfter = b.Remaining(), b.ResetAfter(), r.Retry
		d.mixedCosts = c.Costs != nil
	}
	if r.Slot.Key != "" {
		d.Slot = l.newSlot(req, c.Buckets[r.Slot.Index], r.Slot.Key, r.Slot.ID)
	}
	return d
}

// The stack's bucket state converts to BucketState (the same fields, in
// the same order), and its verdicts are numbered as the reasons
// (compile-time checks).
var (
	_ = BucketState(stack.Bucket{})
	_ = [1]struct{}{}[ReasonOverLimit-Reason(stack.OverLimit)]
	_ = [1]struct{}{}[ReasonCostExceedsCapacity-Reason(stack.CostExceedsCapacity)]
	_ = [1]struct{}{}[ReasonFailedOpen-Reason(stack.FailedOpen)]
	_ = [1]struct{}{}[ReasonFailedClosed-Reason(stack.FailedClosed)]
	_ = [1]struct{}{}[ReasonCanceled-Reason(stack.Canceled)]
	_ = [1]struct{}{}[ReasonOverloaded-Reason(stack.Overloaded)]
	_ = [1]struct{}{}[ReasonConcurrencyLimit-Reason(stack.ConcurrencyLimit)]
)
