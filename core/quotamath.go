package core

import (
	"math"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// ttlMillis is the key TTL of a bucket of quota q: the time an empty bucket
// takes to refill, plus a second of margin. An idle bucket is full by then,
// so its expiry loses nothing. Always a positive integer, formatted here
// rather than by the server.
func ttlMillis(q quota.Quota) string {
	ms := math.Ceil(float64(q.Capacity)/q.RefillPerSecond*1000) + 1000
	return strconv.FormatInt(int64(ms), 10)
}

// seconds converts float seconds to a Duration, rounding up to the next
// nanosecond and saturating instead of overflowing.
func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	ns := math.Ceil(s * 1e9)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
