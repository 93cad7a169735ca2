package quota

import (
	"strings"
	"testing"
)

func TestQuotaValidate(t *testing.T) {
	for _, tt := range []struct {
		q    Quota
		want string
	}{
		{Quota{0, 1, 0, 0, 0}, "capacity must be > 0"},
		{Quota{-1, 1, 0, 0, 0}, "capacity must be > 0"},
		{Quota{MaxCapacity + 1, 1e9, 0, 0, 0}, "capacity must be <="},
		{Quota{1, 0, 0, 0, 0}, "refill rate must be > 0"},
		{Quota{1, -1, 0, 0, 0}, "refill rate must be > 0"},
		{Quota{1, nan(), 0, 0, 0}, "refill rate must be finite"},
		{Quota{1, inf(), 0, 0, 0}, "refill rate must be finite"},
		{Quota{1, 2e12, 0, 0, 0}, "refill rate must be <="},
		{Quota{1000, 1e-6, 0, 0, 0}, "time to refill"},
		{Quota{10, 2, 0, 0, 0}, ""},
		{Quota{10, 2, -1, 0, 0}, "concurrency must be 0 (none) to"},
		{Quota{10, 2, MaxConcurrency + 1, 0, 0}, "concurrency must be 0 (none) to"},
		{Quota{10, 2, 8, 0, 0}, ""},
		{Quota{10, 2, 0, -1, 0}, "max debt must be 0 (no cap) to"},
		{Quota{10, 2, 0, MaxCost + 1, 0}, "max debt must be 0 (no cap) to"},
		{Quota{10, 2, 0, 1, 0}, ""},
		{Quota{10, 2, 0, MaxCost, 0}, ""},
		{Quota{10, 2, 0, 0, 0.5}, "max settle ratio must be 0 (none) or 1 to"},
		{Quota{10, 2, 0, 0, -1}, "max settle ratio must be 0 (none) or 1 to"},
		{Quota{10, 2, 0, 0, nan()}, "max settle ratio must be 0 (none) or 1 to"},
		{Quota{10, 2, 0, 0, inf()}, "max settle ratio must be 0 (none) or 1 to"},
		{Quota{10, 2, 0, 0, MaxSettleRatioLimit + 1}, "max settle ratio must be 0 (none) or 1 to"},
		{Quota{10, 2, 0, 0, 1}, ""},
		{Quota{10, 2, 0, 100, 1.5}, ""},
	} {
		err := tt.q.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.q, err, tt.want)
		}
	}
}

func nan() float64 { var z float64; return z / z }
func inf() float64 { var z float64; return 1 / z }
