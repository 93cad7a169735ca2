package test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The server passes the limiter the buckets of the rules it matched a
// request against, as data: a rule is decided by its limit whatever
// resolver the limiter was given (here the services' tier resolver, which
// has never heard of the rules), and a request is decided on the one
// configuration it was matched against, even when another is loaded while
// it is checked.
func TestRulesDecideOnTheConfigurationTheyMatched(t *testing.T) {
	parse := func(body string) *rls.Config {
		t.Helper()
		c, err := rls.ParseConfig("rules.yaml", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const strict = "domain: edge\ndescriptors:\n  - key: user\n    tollgate: {tenant: user}\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	const loose = "domain: edge\ndescriptors:\n  - key: user\n    tollgate: {tenant: user}\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
	tiers, err := quota.NewResolver(testTiers())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewRules(parse(strict), tiers)
	if err != nil {
		t.Fatal(err)
	}
	// the limiter's resolver is the tiers', and loads the loose
	// configuration when first asked (for the tenant's class, mid-request)
	var asked atomic.Int64
	res := quota.ResolverFunc(func(ctx context.Context, tn quota.Tenant, class string) ([]quota.Bucket, error) {
		if asked.Add(1) == 1 {
			rules.Set(parse(loose))
		}
		return tiers.Buckets(ctx, tn, class)
	})
	lim, err := core.New(redistest.Client(t), res, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	c := serve(t, lim, rls.WithRules(rules))

	// the tenant's descriptor first: its check loads the loose limit
	// before the address's is checked, on the strict one it matched
	first := ask(t, c, edge(desc("user", "u1"), desc("remote_address", "192.0.2.1")))
	if first.OverallCode != rlsv3.RateLimitResponse_OK || first.Statuses[1].GetCurrentLimit().GetRequestsPerUnit() != 2 || first.Statuses[1].GetLimitRemaining() != 1 {
		t.Fatalf("first request: %v, want OK on the strict rule (2 per hour, 1 left)", first)
	}
	if asked.Load() != 1 {
		t.Fatalf("the limiter's resolver was asked %d times, want once (the tenant's class only)", asked.Load())
	}
	// the loose configuration is in force for the next request: the same
	// bucket (its one token left), its new limit
	if r := ask(t, c, edge(desc("remote_address", "192.0.2.1"))); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1000 {
		t.Fatalf("second request, after the reload: %v, want OK on 1000 per hour", r)
	}
	// and back: the strict limit denies the emptied bucket
	rules.Set(parse(strict))
	if r := ask(t, c, edge(desc("remote_address", "192.0.2.1"))); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("strict again, third request: %v, want OVER_LIMIT on 2 per hour", r)
	}
	if asked.Load() != 1 {
		t.Fatalf("the limiter's resolver was asked %d times for the rules' classes", asked.Load()-1)
	}
}

// TestNegativeHitOnARuleWithTheTiersResolver: a negative hit on a rule's
// descriptor refunds the rule's bucket when the limiter resolves through
// the tiers alone (as tollgate-rls wires it): the rule's buckets go with
// the refund as data, as a hit's do.
func TestNegativeHitOnARuleWithTheTiersResolver(t *testing.T) {
	cfg, err := rls.ParseConfig("rules.yaml", []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := quota.NewResolver(testTiers())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewRules(cfg, tiers)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(redistest.Client(t), tiers, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	var failed atomic.Int64
	c := serve(t, lim, rls.WithRules(rules), rls.WithErrorHandler(func(context.Context, error) { failed.Add(1) }))
	hit := desc("remote_address", "192.0.2.7")
	hit.HitsAddend = wrapperspb.UInt64(4)
	if res := ask(t, c, edge(hit)); res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("a hit of 4 on 5 an hour: %v, want OK with 1 left", res)
	}
	neg := desc("remote_address", "192.0.2.7")
	neg.IsNegativeHits = true
	neg.HitsAddend = wrapperspb.UInt64(3)
	if res := ask(t, c, edge(neg)); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the negative hit of 3: %v", res)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("the negative hit failed %d times (its rule's buckets not found)", n)
	}
	peek := desc("remote_address", "192.0.2.7")
	peek.HitsAddend = wrapperspb.UInt64(0)
	if res := ask(t, c, edge(peek)); res.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Fatalf("after the refund of 3: %v, want 4 left", res)
	}
}
