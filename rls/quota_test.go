package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// fairShare is max-min: a demand under an equal share gets what it asks,
// the rest is shared equally among the others, and a rate no one asks for
// is shared equally.
func TestFairShare(t *testing.T) {
	cases := []struct {
		rate    float64
		demands []float64
		want    []float64
	}{
		{100, []float64{150, 150, 150, 150}, []float64{25, 25, 25, 25}},
		{100, []float64{10, 20, 300, 300}, []float64{10, 20, 35, 35}},
		{100, []float64{10, 20}, []float64{45, 55}}, // 70 left, 35 each
		{100, []float64{0, 200}, []float64{0, 100}},
		{100, []float64{100}, []float64{100}},
		{100, []float64{0, 0}, []float64{50, 50}},
	}
	for _, tc := range cases {
		var sum float64
		for i := range tc.demands {
			got := fairShare(tc.rate, tc.demands, i)
			sum += got
			if math.Abs(got-tc.want[i]) > 1e-9 {
				t.Errorf("fairShare(%v, %v, %d) = %v, want %v", tc.rate, tc.demands, i, got, tc.want[i])
			}
		}
		if math.Abs(sum-tc.rate) > 1e-9 {
			t.Errorf("shares of %v add up to %v, not the rate %v", tc.demands, sum, tc.rate)
		}
	}
}

// shape's fill is whole seconds, its tokens set, its burst at least one
// fill; need is what it admits in ttl seconds starting full.
func TestShapeAndNeed(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int64
		want  bucketShape
		need3 int64
	}{
		{25, 0, bucketShape{burst: 25, tokens: 25, fill: 1}, 100},
		{25.9, 40, bucketShape{burst: 40, tokens: 25, fill: 1}, 115},
		{0.5, 0, bucketShape{burst: 1, tokens: 1, fill: 2}, 3},
		{0.001, 0, bucketShape{burst: 1, tokens: 1, fill: maxFill}, 2},
		{0, 0, bucketShape{burst: 1, tokens: 1, fill: maxFill}, 2},
	} {
		got := shape(tc.rate, tc.burst)
		if got != tc.want || got.need(3) != tc.need3 {
			t.Errorf("shape(%v, %d) = %+v need(3) %d, want %+v need %d", tc.rate, tc.burst, got, got.need(3), tc.want, tc.need3)
		}
	}
}

// fit never needs more than the reservation and is never faster than
// wanted; under two tokens it is a deny.
func TestFitStaysWithinTheReservation(t *testing.T) {
	want := bucketShape{burst: 25, tokens: 25, fill: 1}
	for out := int64(0); out < 200; out++ {
		for _, ttl := range []int64{1, 3, 6} {
			s, ok := fit(out, ttl, want)
			if out < 2 {
				if ok {
					t.Errorf("fit(%d, %d) = %+v, want a deny", out, ttl, s)
				}
				continue
			}
			if !ok {
				continue
			}
			if s.need(ttl) > out || s.tokens*want.fill > want.tokens*s.fill || s.fill < 1 || s.tokens < 1 {
				t.Errorf("fit(%d, %d) = %+v: needs %d, or faster than %+v", out, ttl, s, s.need(ttl), want)
			}
		}
	}
}

func TestNewQuotaServiceValidates(t *testing.T) {
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
	defer lim.Close()
	if _, err := NewQuotaService(nil, c); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil limiter: %v", err)
	}
	if _, err := NewQuotaService(lim, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	for name, o := range map[string]QuotaOption{
		"rls.WithAssignmentTTL(0)":    WithAssignmentTTL(0),
		"rls.WithAssignmentTTL(1.5s)": WithAssignmentTTL(1500 * time.Millisecond),
		"rls.WithAssignmentTTL(2h)":   WithAssignmentTTL(2 * time.Hour),
		"rls.WithIdleReports(0)":      WithIdleReports(0),
		"rls.WithIdleReports(101)":    WithIdleReports(101),
		"rls.WithQuotaErrorHandler()": WithQuotaErrorHandler(nil),
	} {
		_, err := NewQuotaService(lim, c, o)
		opt, _, _ := strings.Cut(name, "(")
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), opt+":") {
			t.Errorf("%s: got %v, want an error naming it", name, err)
		}
	}
	if _, err := NewQuotaService(lim, c, nil, WithAssignmentTTL(time.Hour), WithIdleReports(100), WithQuotaErrorHandler(func(context.Context, error) {})); err != nil {
		t.Errorf("valid options: %v", err)
	}
}
