package core

import (
	"context"
	"time"
)

// The check path is a stack of layers, composed once in New: token leases,
// then the deny cache, then the store (the shard's circuit breaker and the
// local fallback, the batcher or a direct call, the script). A layer that is
// off is not in the stack. A check goes down the stack once, each layer
// answering it or handing it to the next, and its decision comes back up
// once.

// layer is one step of the check path.
type layer interface {
	decide(ctx context.Context, c *checkCall) (Decision, error)
}

// checkCall is one resolved check on its way down the stack.
type checkCall struct {
	req     Request
	keys    []string // the buckets' keys, in the order of buckets
	buckets []Bucket
	// cost is the number of tokens to charge in the store: req.Cost, or a
	// lease's size (the answer is still stated for req.Cost)
	cost int64
	sent time.Time // when the check started, on the limiter's clock
	// slot, when not nil, is the bucket with a concurrency limit: the call
	// is the concurrency script's, and an admission takes a slot
	slot *slotCall
}

// stack composes the check path from the limiter's settings: the store at
// the bottom, the deny cache and leases above it when they are on.
func (l *Limiter) stack() layer {
	var top layer = &storeLayer{l: l}
	if l.deny != nil {
		top = &denyLayer{cache: l.deny, metrics: l.metrics, next: top}
	}
	if l.leases != nil {
		top = &leaseLayer{l: l, leases: l.leases, next: top}
	}
	return top
}
