package test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// slotTiers: class jobs holds 2 in flight per tenant (the services' tier
// file, as is), beside the test tiers' classes.
func slotTiers() quota.Tiers {
	ts := testTiers()
	ts.Tiers["free"].Classes["jobs"] = quota.Quota{Capacity: 100, RefillPerSecond: 100, Concurrency: 2}
	return ts
}

// replica is one tollgate-rls process: its own limiter (of the slot group
// gw) and server on the shared store and prefix.
func replica(t *testing.T, c redis.UniversalClient, prefix string, hold time.Duration, opts ...core.Option) (rlsv3.RateLimitServiceClient, *core.Limiter) {
	t.Helper()
	opts = append([]core.Option{core.WithSlotGroup("gw")}, opts...)
	lim := testkit.NewLimiter(t, c, slotTiers(), append(opts, core.WithPrefix(prefix))...)
	t.Cleanup(func() { _ = lim.Close() })
	return serve(t, lim, rls.WithSlotHold(hold)), lim
}

func negativeHit(kv ...string) *rlsv3.RateLimitRequest {
	d := desc(kv...)
	d.IsNegativeHits = true
	return request(0, d)
}

// inFlight is the slots of tenant's jobs in use, as a peek reports them.
func inFlight(t *testing.T, lim *core.Limiter, tenant string) int64 {
	t.Helper()
	d, err := lim.Peek(context.Background(), quota.Tenant{ID: tenant}, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range d.Buckets {
		if b.Name == "jobs" {
			return b.InFlight
		}
	}
	t.Fatalf("peek has no jobs bucket: %+v", d)
	return 0
}

// TestGatewayConcurrencyAcrossReplicas: a class with a concurrency limit
// of 2 holds 2 in flight at the gateway across two tollgate-rls replicas:
// a hit takes a slot and holds it, a negative hit frees one, whichever
// replica each reaches, and a denied hit's negative hit frees none; a
// service's slot in the same bucket is never
// freed by a gateway's negative hit.
func TestGatewayConcurrencyAcrossReplicas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := redistest.Prefix(t)
		a, limA := replica(t, c, prefix, time.Minute)
		b, _ := replica(t, c, prefix, time.Minute)
		hit := request(1, desc("tenant", "t1", "class", "jobs"))
		neg := negativeHit("tenant", "t1", "class", "jobs")
		want := func(step string, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, code rlsv3.RateLimitResponse_Code, held int64) {
			t.Helper()
			if res := ask(t, c, req); res.GetOverallCode() != code {
				t.Fatalf("%s: %v, want %v", step, res, code)
			}
			if n := inFlight(t, limA, "t1"); n != held {
				t.Fatalf("%s: %d in flight, want %d", step, n, held)
			}
			if code == rlsv3.RateLimitResponse_OVER_LIMIT {
				// Envoy sends a denied request's negative hit too, when its
				// 429 ends the stream: it frees nothing
				if res := ask(t, c, neg); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%s, its negative hit: %v", step, res)
				}
				if n := inFlight(t, limA, "t1"); n != held {
					t.Fatalf("%s, its negative hit: %d in flight, want %d: a denied hit's negative hit freed a slot", step, n, held)
				}
			}
		}
		want("hit at A", a, hit, rlsv3.RateLimitResponse_OK, 1)
		want("hit at B", b, hit, rlsv3.RateLimitResponse_OK, 2)
		want("third hit at A", a, hit, rlsv3.RateLimitResponse_OVER_LIMIT, 2)
		want("third hit at B", b, hit, rlsv3.RateLimitResponse_OVER_LIMIT, 2)
		want("negative hit at B (its own)", b, neg, rlsv3.RateLimitResponse_OK, 1)
		want("hit at B", b, hit, rlsv3.RateLimitResponse_OK, 2)
		want("negative hit at B (its own)", b, neg, rlsv3.RateLimitResponse_OK, 1)
		want("negative hit at B (A's)", b, neg, rlsv3.RateLimitResponse_OK, 0)
		want("negative hit at B (none left)", b, neg, rlsv3.RateLimitResponse_OK, 0)
		// A still thinks it holds the slot B freed: its negative hit frees
		// another of the group's, never a second one for one request
		want("hit at B", b, hit, rlsv3.RateLimitResponse_OK, 1)
		want("hit at B", b, hit, rlsv3.RateLimitResponse_OK, 2)
		want("negative hit at A (its slot gone)", a, neg, rlsv3.RateLimitResponse_OK, 1)
		want("negative hit at A", a, neg, rlsv3.RateLimitResponse_OK, 0)

		// a service's request, same bucket, not of the group
		svc := testkit.NewLimiter(t, c, slotTiers(), core.WithPrefix(prefix))
		t.Cleanup(func() { _ = svc.Close() })
		d, err := svc.Allow(context.Background(), quota.Tenant{ID: "t1"}, "jobs", 1)
		if err != nil || d.Slot == nil {
			t.Fatalf("service: %+v, %v", d, err)
		}
		want("hit at A beside the service", a, hit, rlsv3.RateLimitResponse_OK, 2)
		want("hit at B, the service's and A's slots taken", b, hit, rlsv3.RateLimitResponse_OVER_LIMIT, 2)
		want("negative hit at B (A's)", b, neg, rlsv3.RateLimitResponse_OK, 1)
		want("negative hit at B (only the service's left)", b, neg, rlsv3.RateLimitResponse_OK, 1)
		d.Slot.Release()
		if n := inFlight(t, limA, "t1"); n != 0 {
			t.Fatalf("after the service's release: %d in flight", n)
		}
	})
}

// TestGatewayDeadClientSlotReturns: a gateway that sent the hit and died
// (kill -9: it never sends the negative hit) holds the slot for at most
// the hold time (WithSlotHold) past its hit, plus one check timeout for
// the release; measured, and never freed before the hold time.
func TestGatewayDeadClientSlotReturns(t *testing.T) {
	const hold = 2 * time.Second
	const timeout = time.Second
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	a, lim := replica(t, c, prefix, hold, core.WithTimeout(timeout))
	hit := request(1, desc("tenant", "dead", "class", "jobs"))
	start := time.Now()
	for i := range 2 {
		if res := ask(t, a, hit); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("hit %d: %v", i, res)
		}
	}
	hitEnd := time.Now()
	// the gateway is gone: no negative hit comes. Poll the slots in use.
	const poll = 20 * time.Millisecond
	var freed time.Time
	lastProbe := time.Duration(0)
	for deadline := hitEnd.Add(hold + 10*timeout); freed.IsZero(); time.Sleep(poll) {
		if time.Now().After(deadline) {
			t.Fatalf("slots still held %v after the hits (hold %v)", time.Since(hitEnd), hold)
		}
		p := time.Now()
		n := inFlight(t, lim, "dead")
		if n == 0 {
			freed = time.Now()
			if early := freed.Sub(start); early < hold {
				t.Fatalf("slots freed %v after the first hit, before the hold time %v", early, hold)
			}
			if late := p.Sub(hitEnd); late > hold+timeout+poll+lastProbe {
				t.Fatalf("slots freed %v after the last hit, more than the hold %v + the check timeout %v (+ one poll)", late, hold, timeout)
			}
			t.Logf("a dead gateway's 2 slots freed %v after its hits (hold %v)", freed.Sub(hitEnd).Round(time.Millisecond), hold)
		}
		lastProbe = time.Since(p)
	}
	if res := ask(t, a, hit); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a hit after the slots returned: %v", res)
	}
}

// TestNegativeHitRefund: for a class without a concurrency limit a
// negative hit refunds its hits_addend to the buckets the hit charged
// (the class's and the tenant-wide ceiling), never above their capacity;
// a denied hit's negative hit refunds nothing.
func TestNegativeHitRefund(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock() // frozen: no refill
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim, rls.WithTrustedTier(true))
		hit := desc("tenant", "r1", "tier", "pro", "class", "export")
		hit.HitsAddend = wrapperspb.UInt64(4)
		if res := ask(t, client, request(0, hit)); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("hit: %v", res)
		}
		if e, ce := stored(t, c, lim, "r1", "export"), stored(t, c, lim, "r1", quota.CeilingBucket); e != 6 || ce != 2 {
			t.Fatalf("after the hit of 4: export %v, ceiling %v; want 6, 2", e, ce)
		}
		neg := desc("tenant", "r1", "tier", "pro", "class", "export")
		neg.IsNegativeHits = true
		neg.HitsAddend = wrapperspb.UInt64(3)
		res := ask(t, client, request(0, neg))
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("negative hit: %v", res)
		}
		if e, ce := stored(t, c, lim, "r1", "export"), stored(t, c, lim, "r1", quota.CeilingBucket); e != 9 || ce != 5 {
			t.Fatalf("after the negative hit of 3: export %v, ceiling %v; want 9, 5", e, ce)
		}
		neg.HitsAddend = wrapperspb.UInt64(50)
		ask(t, client, request(0, neg))
		if e, ce := stored(t, c, lim, "r1", "export"), stored(t, c, lim, "r1", quota.CeilingBucket); e != 10 || ce != 6 {
			t.Fatalf("after a negative hit of 50: export %v, ceiling %v; want the capacities 10, 6", e, ce)
		}
		// a negative hit beside a hit in one request: the negative hit is
		// applied first (here refunding nothing to full buckets), then the hit
		hit.HitsAddend = wrapperspb.UInt64(2)
		neg.HitsAddend = wrapperspb.UInt64(1)
		res = ask(t, client, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{hit, neg}})
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetLimitRemaining() != 4 || stored(t, c, lim, "r1", quota.CeilingBucket) != 4 {
			t.Fatalf("a hit of 2 and a negative hit of 1: %v; ceiling %v", res, stored(t, c, lim, "r1", quota.CeilingBucket))
		}
		// a denied hit charged nothing: its negative hit refunds nothing
		hit.HitsAddend = wrapperspb.UInt64(5)
		if res := ask(t, client, request(0, hit)); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("a hit of 5 with 4 left: %v", res)
		}
		neg.HitsAddend = wrapperspb.UInt64(5)
		ask(t, client, request(0, neg))
		if e, ce := stored(t, c, lim, "r1", "export"), stored(t, c, lim, "r1", quota.CeilingBucket); e != 8 || ce != 4 {
			t.Fatalf("the denied hit's negative hit: export %v, ceiling %v; want 8, 4 (nothing refunded)", e, ce)
		}
		neg.HitsAddend = wrapperspb.UInt64(1)
		ask(t, client, request(0, neg))
		if e, ce := stored(t, c, lim, "r1", "export"), stored(t, c, lim, "r1", quota.CeilingBucket); e != 9 || ce != 5 {
			t.Fatalf("the next negative hit: export %v, ceiling %v; want 9, 5", e, ce)
		}
	})
}
