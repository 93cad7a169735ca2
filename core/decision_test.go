package core_test

import (
	"math"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// A bucket's remaining is its balance rounded down, never negative; its
// reset is the time its refill takes to fill it, rounded up to the
// nanosecond, saturating, zero when full.
func TestBucketStateRemainingAndResetAfter(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 4}
	tests := []struct {
		tokens    float64
		remaining int64
		reset     time.Duration
	}{
		{10, 10, 0},
		{9.75, 9, 62500 * time.Microsecond},
		{0.5, 0, 2375 * time.Millisecond},
		{-3, 0, 3250 * time.Millisecond},
	}
	for _, tt := range tests {
		b := core.BucketState{Name: "default", Quota: q, Tokens: tt.tokens}
		if got := b.Remaining(); got != tt.remaining {
			t.Errorf("tokens %v: Remaining() = %d, want %d", tt.tokens, got, tt.remaining)
		}
		if got := b.ResetAfter(); got != tt.reset {
			t.Errorf("tokens %v: ResetAfter() = %v, want %v", tt.tokens, got, tt.reset)
		}
	}
	slow := core.BucketState{Quota: quota.Quota{Capacity: math.MaxInt64, RefillPerSecond: 1e-9}, Tokens: -1e18}
	if got := slow.ResetAfter(); got != time.Duration(math.MaxInt64) {
		t.Errorf("a reset beyond a Duration: ResetAfter() = %v, want it saturated", got)
	}
}
