// Package bucketmath holds the token-bucket refill of the script
// (lua/tokenbucket.lua) for the layers that answer without it. Its formula
// and operand order are the script's, so that the same balances give the
// same doubles.
package bucketmath

import "math"

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
