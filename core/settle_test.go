package core_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/core"
)

// Only a decision the store admitted and charged, with a cost, has a
// reservation to settle; the gate attaches a cost report by the same rule.
func TestSettleableOnlyWhenTheStoreCharged(t *testing.T) {
	charged := core.Decision{Allowed: true, Reason: core.ReasonOK, Cost: 2, Buckets: []core.BucketState{{Name: "default"}}}
	tests := []struct {
		name string
		edit func(*core.Decision)
		want bool
	}{
		{"charged by the store", func(*core.Decision) {}, true},
		{"local fallback", func(d *core.Decision) { d.Fallback = true }, false},
		{"cost zero", func(d *core.Decision) { d.Cost = 0 }, false},
		{"no bucket", func(d *core.Decision) { d.Buckets = nil }, false},
		{"failed open", func(d *core.Decision) { d.Reason = core.ReasonFailedOpen }, false},
		{"denied", func(d *core.Decision) { d.Allowed, d.Reason = false, core.ReasonOverLimit }, false},
	}
	for _, tt := range tests {
		d := charged
		tt.edit(&d)
		if got := d.Settleable(); got != tt.want {
			t.Errorf("%s: Settleable() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
