package core

import (
	"math"
	"strconv"

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
