package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// current_limit is the sustained rate in the shortest whole unit.
func TestCurrentLimit(t *testing.T) {
	cases := []struct {
		rate float64
		n    uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{2, 2, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{0.1, 6, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{0.5, 30, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{1.0 / 3600, 1, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{10.0 / 86400, 10, rlsv3.RateLimitResponse_RateLimit_DAY},
		{1.0 / 7, 12343, rlsv3.RateLimitResponse_RateLimit_DAY},       // not whole in any unit: per day, rounded
		{1.0 / 400 / 86400, 1, rlsv3.RateLimitResponse_RateLimit_DAY}, // slower than one a day: at least 1
		{1e12, math.MaxUint32, rlsv3.RateLimitResponse_RateLimit_SECOND},
	}
	for _, tc := range cases {
		l := currentLimit("default", quota.Quota{Capacity: 10, RefillPerSecond: tc.rate})
		if l.GetRequestsPerUnit() != tc.n || l.GetUnit() != tc.unit || l.GetName() != "default" {
			t.Errorf("rate %v/s: %v, want %d per %v", tc.rate, l, tc.n, tc.unit)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil limiter: %v", err)
	}
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	lim, err := core.New(c, res, core.WithBatching(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, -1, quota.MaxCost + 1} {
		if _, err := New(lim, WithMaxCost(n)); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("WithMaxCost(%d): %v", n, err)
		}
	}
	if _, err := New(lim, WithMaxCost(quota.MaxCost), nil, WithErrorHandler(func(context.Context, error) {})); err != nil {
		t.Errorf("valid options: %v", err)
	}
	// an option given nothing it can use fails New, naming the option
	for name, o := range map[string]Option{
		"rls.WithErrorHandler": WithErrorHandler(nil),
		"rls.WithRules":        WithRules(nil),
		"rls.WithTiers":        WithTiers(nil),
		"rls.WithHeaderStyle":  WithHeaderStyle(1 << 7),
		"rls.WithMaxCost":      WithMaxCost(0),
	} {
		_, err := New(lim, o)
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), name+":") {
			t.Errorf("%s: got %v, want an error naming it", name, err)
		}
	}
	for _, names := range [][3]string{{"Bad Name", "", ""}, {"", "X-Left:", ""}, {"", "", "Reset\n"}} {
		if _, err := New(lim, WithLimitHeaders(names[0], names[1], names[2])); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("WithLimitHeaders(%q): %v", names, err)
		}
	}
	if _, err := New(lim, WithLimitHeaders("", "X-Left", "")); err != nil {
		t.Errorf("WithLimitHeaders: %v", err)
	}
}
