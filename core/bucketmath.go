package core

import (
	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The token-bucket arithmetic of the script (lua/tokenbucket.lua), for the
// answers the limiter works out without it: the local fallback, the deny
// cache, leases and the retry time of the script's own denials. The
// formulas and their operand order are the script's, so that the same
// balances give the same doubles, and one place states them (the refill is
// internal/bucketmath's, shared with the deny cache).

// refill returns the balance of a bucket of quota q that held tokens
// elapsed seconds ago: refilled at q's rate, capped at its capacity. A
// non-positive elapsed time (a clock step back) refills nothing.
func refill(q quota.Quota, tokens, elapsed float64) float64 {
	return bucketmath.Refill(q.Capacity, q.RefillPerSecond, tokens, elapsed)
}

// waitFor is how many seconds a bucket of quota q holding tokens takes to
// hold cost: the retry time of a denial by that bucket.
func waitFor(q quota.Quota, tokens float64, cost int64) float64 {
	return (float64(cost) - tokens) / q.RefillPerSecond
}

// judge is the script's verdict on charging cost to every bucket of states
// (balances before the charge, refilled to now): ReasonOK; or
// ReasonCostExceedsCapacity, bound by the first bucket whose capacity is
// below the cost; or ReasonOverLimit, bound by the short bucket that takes
// longest to hold the cost, with that wait in seconds. The binding bucket
// of an admission is [tightest] of the balances after the charge.
func judge(states []BucketState, cost int64) (reason Reason, binding int, retry float64) {
	for i, s := range states {
		switch {
		case cost > s.Quota.Capacity:
			if reason != ReasonCostExceedsCapacity {
				reason, binding, retry = ReasonCostExceedsCapacity, i, 0
			}
		case s.Tokens < float64(cost) && reason != ReasonCostExceedsCapacity:
			if wait := waitFor(s.Quota, s.Tokens, cost); reason == ReasonOK || wait > retry {
				binding, retry = i, wait
			}
			reason = ReasonOverLimit
		}
	}
	return reason, binding, retry
}

// tightest is the index of the bucket left with the fewest tokens (ties: the
// slowest to refill), the binding bucket of an admitted request.
func tightest(states []BucketState) int {
	best := 0
	for i := 1; i < len(states); i++ {
		s, b := states[i], states[best]
		if s.Tokens < b.Tokens || s.Tokens == b.Tokens &&
			(float64(s.Quota.Capacity)-s.Tokens)/s.Quota.RefillPerSecond > (float64(b.Quota.Capacity)-b.Tokens)/b.Quota.RefillPerSecond {
			best = i
		}
	}
	return best
}
