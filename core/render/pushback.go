package render

import (
	"time"

	"github.com/tollgate-go/tollgate/core"
)

// PushbackMillis is the gRPC grpc-retry-pushback-ms value of a decision: the
// exact retry delay rounded up to milliseconds for an over-limit or
// concurrency denial, -1
// ("do not retry", gRFC A6) when the cost can never be met, the overload
// hint for a shed check (ReasonOverloaded), 0 otherwise.
func PushbackMillis(d core.Decision) int64 {
	switch d.Reason {
	case core.ReasonOverLimit, core.ReasonConcurrencyLimit:
		ms := (d.RetryAfter + time.Millisecond - 1) / time.Millisecond
		return max(int64(ms), 1)
	case core.ReasonCostExceedsCapacity:
		return -1
	case core.ReasonOverloaded:
		return overloadRetrySeconds * 1000
	}
	return 0
}
