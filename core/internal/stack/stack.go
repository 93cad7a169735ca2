// Package stack is the check path's vocabulary: the Call a resolved check
// carries down the stack of layers, the Result that comes back up, and the
// Layer each feature package implements. A layer knows only the next one:
// it answers a call itself or hands it on, and may change the answer on
// its way back. Everything a layer needs from the request arrives in the
// Call, as data; the buckets and their quotas are resolved before the
// stack is entered.
package stack

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// Layer is one step of the check path.
type Layer interface {
	Decide(ctx context.Context, c Call) (Result, error)
}

// Call is one resolved check on its way down the stack. It is passed by
// value: a layer that changes it (a lease's charge) changes its own copy.
type Call struct {
	// Tenant and Class are the request's; Also its other classes (a call
	// with any is never leased)
	Tenant quota.Tenant
	Class  string
	Also   []string
	// Cost is the request's cost: what its answer states.
	Cost int64
	// Charge is the number of tokens to charge in the store: Cost, or a
	// lease's size.
	Charge int64
	// Costs, when not nil, is each bucket's cost, in the order of Buckets
	// (a request whose classes cost differently): the store charges each
	// bucket its own, and Charge is unused. Only the store answers it.
	Costs []int64
	// Keys are the buckets' keys, in the order of Buckets.
	Keys    []string
	Buckets []quota.Bucket
	// Sent is when the check started, on the limiter's clock.
	Sent time.Time
	// Slot is the concurrency slot the call takes when admitted: the
	// concurrency script's call. Key empty: none, the token-bucket
	// script's call.
	Slot Slot
	// Failure, when not nil, is a store failure this call shares: the one
	// of a lease acquisition it waited for. The call is answered without
	// the store, as that failure says.
	Failure error
}

// Slot is what a call of a bucket set with a concurrency limit adds: the
// bucket with the limit, its slot set's key and the new slot's id.
type Slot struct {
	Index int
	Key   string
	ID    string
}

// Verdict says why a result came out as it did; numbered as the limiter's
// reasons.
type Verdict uint8

// Verdicts.
const (
	OK Verdict = iota
	OverLimit
	CostExceedsCapacity
	FailedOpen
	FailedClosed
	_ // shadow denied: the root's, above the stack
	_ // invalid: the root's, before the stack
	_ // unresolved: the root's, before the stack
	Canceled
	Overloaded
	ConcurrencyLimit
)

// Bucket is one bucket's state after a call: the fields, in order, of the
// limiter's bucket state.
type Bucket struct {
	Name  string
	Quota quota.Quota
	// Tokens is the balance after the call, fractional.
	Tokens float64
	// Stamp is the time the store keeps with the balance (zero when the
	// store did not answer, or denied).
	Stamp time.Time
	// InFlight is the slots in use of the bucket with a concurrency limit.
	InFlight int64
}

// Result is a call's answer on its way up the stack.
type Result struct {
	Verdict Verdict
	// Buckets holds each bucket's state, in the call's order; nil for an
	// answer of no bucket (the failure policy, a canceled or shed call).
	Buckets []Bucket
	// Binding is the index of the binding bucket in Buckets.
	Binding int
	// Retry is how long until the call could be admitted (a denial's).
	Retry time.Duration
	// Cost is the cost the answer states: the binding bucket's.
	Cost int64
	// Fallback: answered by the local fallback while the store failed.
	Fallback bool
	// Local: answered without a store call (a lease, the deny cache).
	Local bool
	// Slot is the concurrency slot the store gave the call, held by the
	// caller from now on (Key empty: none).
	Slot Slot
	// Wrote is when the store call's command was handed to the connection
	// (zero when it never was, or there was none).
	Wrote time.Time
}

// Degraded reports whether the result was made without the store because
// it failed (the failure policy or the local fallback).
func (r *Result) Degraded() bool {
	return r.Verdict == FailedOpen || r.Verdict == FailedClosed || r.Fallback
}

// States returns each bucket of bs as a balance (capacity, rate, tokens),
// for bucketmath's Judge and Tightest.
func States(bs []Bucket) func(i int) (int64, float64, float64) {
	return func(i int) (int64, float64, float64) {
		b := &bs[i]
		return b.Quota.Capacity, b.Quota.RefillPerSecond, b.Tokens
	}
}

// Balances returns the buckets of c with the given balances, as a layer
// that answers without the store states them.
func Balances(buckets []quota.Bucket, tokens []float64) []Bucket {
	states := make([]Bucket, len(buckets))
	for i, b := range buckets {
		states[i] = Bucket{Name: b.Name, Quota: b.Quota, Tokens: tokens[i]}
	}
	return states
}
