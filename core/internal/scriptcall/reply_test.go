package scriptcall

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The script's replies are stated as results: an admission with its
// stamp, a denial with the wait for the binding bucket's own cost, a cost
// above a capacity as never, a denial for want of a slot with the reply's
// wait; a reply of the wrong shape is a protocol error.
func TestParseReplies(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	one := []quota.Bucket{{Name: "a", Quota: q}}
	two := []quota.Bucket{{Name: "a", Quota: q}, {Name: "b", Quota: q}}
	r, err := parseReply("7.5 1000", one, 2, nil)
	if err != nil || r.Verdict != stack.OK || r.Buckets[0].Tokens != 7.5 || r.Buckets[0].Stamp != time.UnixMicro(1000) || r.Cost != 2 {
		t.Errorf("admission: %+v, %v", r, err)
	}
	r, err = parseReply("0.5", one, 2, nil)
	if err != nil || r.Verdict != stack.OverLimit || r.Retry != 750*time.Millisecond || !r.Buckets[0].Stamp.IsZero() {
		t.Errorf("denial: %+v, %v; want a wait of 0.75 s", r, err)
	}
	r, err = parseReply([]any{int64(0), int64(1), int64(2), "9", "1"}, two, 2, []int64{2, 12})
	if err != nil || r.Verdict != stack.CostExceedsCapacity || r.Binding != 1 || r.Cost != 12 || r.Retry != 0 {
		t.Errorf("a mixed-cost denial by a bucket whose own cost is above its capacity: %+v, %v", r, err)
	}
	r, err = parseSlotReply([]any{int64(0), int64(3), int64(1), int64(2), int64(4000), "9 5", "8 5"}, two, 1, nil, 1)
	if err != nil || r.Verdict != stack.ConcurrencyLimit || r.Binding != 1 || r.Buckets[1].InFlight != 2 || r.Retry != 4*time.Millisecond {
		t.Errorf("a denial for want of a slot: %+v, %v", r, err)
	}
	if _, err := parseReply([]any{int64(1)}, two, 1, nil); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("a short reply: err %v, want a protocol error", err)
	}
}
