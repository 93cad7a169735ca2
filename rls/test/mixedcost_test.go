package test

import (
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// hits sets a descriptor's hits_addend.
func hits(n uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestMixedCostOneTenantAllOrNothing: the descriptors of one tenant are one
// script call whatever their hits_addend. The one over its limit is
// OVER_LIMIT and the other OK, as the reference answers them, but the other
// is not charged (the reference charges it); a following request finds its
// bucket whole. A tenant-wide ceiling is charged once, the larger cost.
func TestMixedCostOneTenantAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim, rls.WithTrustedTier(true))

		// export (10 burst) down to 2
		if res := ask(t, client, request(0, hits(8, "tenant", "t1", "class", "export"))); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("export 8: %v", res)
		}
		// default 1 (3 burst) and export 5 (2 left): export denies, so
		// default is not charged
		res := ask(t, client, request(0, hits(1, "tenant", "t1"), hits(5, "tenant", "t1", "class", "export")))
		st := res.GetStatuses()
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st[0].GetCode() != rlsv3.RateLimitResponse_OK || st[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("default 1 + export 5: %v; want OK and OVER_LIMIT, as the reference", res)
		}
		if st[0].GetLimitRemaining() != 3 {
			t.Errorf("default reports %d left, want 3 (not charged)", st[0].GetLimitRemaining())
		}
		if got := stored(t, c, lim, "t1", "export"); got != 2 {
			t.Errorf("export = %v after its denial, want 2", got)
		}
		// default still has all 3: a request of 3 passes and leaves 0
		res = ask(t, client, request(0, hits(3, "tenant", "t1")))
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("default 3 after the denied request: %v; want OK with 0 left (the denial charged nothing)", res)
		}

		// pro: default 1 and export 4 under a ceiling of 6: admitted in one
		// call, the ceiling charged 4 (once, the larger), not 5
		pro := request(0, hits(1, "tenant", "p1", "tier", "pro"), hits(4, "tenant", "p1", "tier", "pro", "class", "export"))
		if res := ask(t, client, pro); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("pro default 1 + export 4: %v", res)
		}
		if got := stored(t, c, lim, "p1", quota.CeilingBucket); got != 2 {
			t.Errorf("ceiling = %v, want 2 (6 less the larger cost, 4, once)", got)
		}
		for class, want := range map[string]float64{"default": 4, "export": 6} {
			if got := stored(t, c, lim, "p1", class); got != want {
				t.Errorf("pro %s = %v, want %v (its own cost)", class, got, want)
			}
		}
		// again: the ceiling (2) cannot take 4: nothing is charged
		clock.Advance(time.Millisecond)
		res = ask(t, client, pro)
		if st := res.GetStatuses(); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st[1].GetCurrentLimit().GetName() != quota.CeilingBucket {
			t.Fatalf("pro again: %v; want OVER_LIMIT by the ceiling", res)
		}
		if got := stored(t, c, lim, "p1", "default"); got > 4.01 || got < 4 {
			t.Errorf("pro default = %v after the ceiling's denial, want 4 (not charged)", got)
		}
	})
}
