package core

import (
	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The token-bucket arithmetic of the scripts (lua/refill.lua), for the
// answers the limiter works out without it: the local fallback, the deny
// cache, leases and the retry time of the script's own denials. The
// formulas and their operand order are the script's, so that the same
// balances give the same doubles, and one place states them:
// internal/bucketmath, shared with the deny cache and the local fallback.

// refill returns the balance of a bucket of quota q that held tokens
// elapsed seconds ago: refilled at q's rate, capped at its capacity. A
// non-positive elapsed time (a clock step back) refills nothing.
func refill(q quota.Quota, tokens, elapsed float64) float64 {
	return bucketmath.Refill(q.Capacity, q.RefillPerSecond, tokens, elapsed)
}

// waitFor is how many seconds a bucket of quota q holding tokens takes to
// hold cost: the retry time of a denial by that bucket.
func waitFor(q quota.Quota, tokens float64, cost int64) float64 {
	return bucketmath.WaitFor(q.RefillPerSecond, tokens, cost)
}

// judge is the script's verdict on charging cost to every bucket of states
// (balances before the charge, refilled to now), as bucketmath.Judge
// states it: ReasonOK, ReasonCostExceedsCapacity or ReasonOverLimit, the
// binding bucket and the retry time in seconds. The binding bucket of an
// admission is [tightest] of the balances after the charge.
func judge(states []BucketState, cost int64) (reason Reason, binding int, retry float64) {
	v, binding, retry := bucketmath.Judge(len(states), stateAt(states), cost)
	return Reason(v), binding, retry
}

// tightest is the index of the bucket left with the fewest tokens (ties: the
// slowest to refill), the binding bucket of an admitted request.
func tightest(states []BucketState) int {
	return bucketmath.Tightest(len(states), stateAt(states))
}

func stateAt(states []BucketState) func(i int) (int64, float64, float64) {
	return func(i int) (int64, float64, float64) {
		s := states[i]
		return s.Quota.Capacity, s.Quota.RefillPerSecond, s.Tokens
	}
}

// bucketmath's verdicts are numbered as the reasons (a compile-time check)
var (
	_ = [1]struct{}{}[ReasonOverLimit-Reason(bucketmath.OverLimit)]
	_ = [1]struct{}{}[ReasonCostExceedsCapacity-Reason(bucketmath.CostExceedsCapacity)]
)
