package core

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// The check path is a stack of layers, composed once in New: token leases
// (lease.go), then the deny cache (denylayer.go), then the store shard's
// circuit breaker and the local fallback (degrade.go), then the script call,
// through the batcher or directly (charge.go). A layer that is
// off is not in the stack. A check goes down the stack once, each layer
// answering it or handing it to the next, and its decision comes back up
// once.

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
	sent time.Time // when the check started, on the limiter's clock
	// slot, when not nil, is the bucket with a concurrency limit: the call
	// is the concurrency script's, and an admission takes a slot
	slot *slotCall
}

// stack composes the check path from the limiter's settings: the script
// call at the bottom, the circuit breaker and fallback above it, then the
// deny cache and leases when they are on.
func (l *Limiter) stack() layer {
	var top layer = &breakerLayer{l: l, script: &scriptLayer{l: l}}
	if l.deny != nil {
		top = &denyLayer{cache: l.deny, metrics: l.metrics, next: top}
	}
	if l.leases != nil {
		top = &leaseLayer{l: l, leases: l.leases, next: top}
	}
	return top
}
