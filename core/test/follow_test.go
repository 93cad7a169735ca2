package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestFollowOneRequest is the request
// docs/internals/following-one-request.md follows through the check path:
// one GET /v1/profile of a free-tier tenant through Gate.Decide in the Gin
// example's default
// configuration (the built-in free tier, batching on, the circuit breaker
// on, fail-open, no leases, no deny cache), after one warm-up request has
// loaded the script and the tenant's resolver entry. tools/followpath runs
// it under the debugger and counts the files of core the followed call
// enters. The check timeout is longer than the example's 100 ms only so
// that a traced process, stopped at every function, still gets its
// answer: the path is the one of an answered check either way.
func TestFollowOneRequest(t *testing.T) {
	r, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": {Capacity: 20, RefillPerSecond: 2}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.New(redistest.Client(t), r, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	g, err := gate.New(l, gate.WithRoutes(gate.Routes{
		"GET /v1/profile": {Class: "default", Cost: 1},
		"GET /healthz":    {Exempt: true},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t42", Tier: "free"})
	e := gate.Endpoint{Method: "GET", Pattern: "/v1/profile", ClientIP: "192.0.2.1"}
	start := time.Now()
	warm := g.Decide(ctx, e)
	if !warm.Proceed || warm.Decision.Remaining != 19 {
		t.Fatalf("warm-up request: proceed %v, remaining %d, err %v; want an admission leaving 19", warm.Proceed, warm.Decision.Remaining, warm.Err)
	}
	// charged by the store: below the warm-up's balance plus what refilled
	// since (a traced process is slow), and stamped by it
	v := followedDecide(ctx, g, e)
	most := min(20, warm.Decision.Tokens+2*time.Since(start).Seconds()) - 1
	if !v.Proceed || v.Decision.Reason != core.ReasonOK || v.Err != nil || v.Decision.Local ||
		v.Decision.Tokens > most || v.Decision.Buckets[0].Stamp.IsZero() {
		t.Fatalf("followed request: proceed %v, reason %v, tokens %v after %v, err %v; want a store admission",
			v.Proceed, v.Decision.Reason, v.Decision.Tokens, warm.Decision.Tokens, v.Err)
	}
}

// followedDecide is the followed call: tools/followpath counts from its
// entry to its return.
//
//go:noinline
func followedDecide(ctx context.Context, g *gate.Gate, e gate.Endpoint) gate.Verdict {
	return g.Decide(ctx, e)
}
