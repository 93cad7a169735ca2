// Package bucketmath holds the token-bucket refill of the scripts
// (lua/refill.lua, the fragment every script is built with) for the layers
// that answer without it. Its formula and operand order are the
// fragment's, so that the same balances give the same doubles.
package bucketmath

import (
	"math"
	"time"
)

// Refill returns the balance of a bucket of the given capacity and rate (in
// tokens per second) that held tokens elapsed seconds ago: refilled at the
// rate, capped at the capacity. A non-positive elapsed time (a clock step
// back) refills nothing.
func Refill(capacity int64, rate, tokens, elapsed float64) float64 {
	if elapsed <= 0 {
		return tokens
	}
	return math.Min(float64(capacity), tokens+elapsed*rate)
}

// Verdicts of Judge: the script's reasons, numbered as the limiter's
// (ReasonOK, ReasonOverLimit, ReasonCostExceedsCapacity).
const (
	OK uint8 = iota
	OverLimit
	CostExceedsCapacity
)

// WaitFor is how many seconds a bucket refilling at rate and holding
// tokens takes to hold cost: the retry time of a denial by that bucket.
func WaitFor(rate, tokens float64, cost int64) float64 {
	return (float64(cost) - tokens) / rate
}

// Judge is the script's verdict on charging cost to n buckets, bucket i of
// the given capacity, rate and balance (before the charge, refilled to
// now): OK; or CostExceedsCapacity, bound by the first bucket whose
// capacity is below the cost; or OverLimit, bound by the short bucket that
// takes longest to hold the cost, with that wait in seconds. The binding
// bucket of an admission is Tightest of the balances after the charge.
func Judge(n int, bucket func(i int) (capacity int64, rate, tokens float64), cost int64) (verdict uint8, binding int, retry float64) {
	for i := range n {
		capacity, rate, tokens := bucket(i)
		switch {
		case cost > capacity:
			if verdict != CostExceedsCapacity {
				verdict, binding, retry = CostExceedsCapacity, i, 0
			}
		case tokens < float64(cost) && verdict != CostExceedsCapacity:
			if wait := WaitFor(rate, tokens, cost); verdict == OK || wait > retry {
				binding, retry = i, wait
			}
			verdict = OverLimit
		}
	}
	return verdict, binding, retry
}

// Tightest is the index of the bucket left with the fewest tokens (ties:
// the slowest to refill), the binding bucket of an admitted request.
func Tightest(n int, bucket func(i int) (capacity int64, rate, tokens float64)) int {
	best := 0
	bc, br, bt := bucket(0)
	for i := 1; i < n; i++ {
		c, r, t := bucket(i)
		if t < bt || t == bt && (float64(c)-t)/r > (float64(bc)-bt)/br {
			best, bc, br, bt = i, c, r, t
		}
	}
	return best
}

// Duration converts float seconds to a Duration, rounding up to the next
// nanosecond and saturating instead of overflowing: a wait of any length
// reads as a wait, never as none. Zero for none (and for NaN).
func Duration(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	ns := math.Ceil(s * 1e9)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
