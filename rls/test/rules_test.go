package test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tenantRules: the gateway's per-tenant rule shares the services' buckets;
// only the second rule trusts the descriptor's tier.
const tenantRules = `domain: edge
descriptors:
  - key: tenant
    tollgate: {tenant: tenant, class: export}
  - key: org
    descriptors:
      - key: tier
        tollgate: {tenant: org, tier: tier}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: user
    tollgate: {tenant: user}
`

// rulesServer serves cfg over the test tiers on the shared Redis.
func rulesServer(t *testing.T, cfg string, limOpts []core.Option, opts ...rls.Option) (rlsv3.RateLimitServiceClient, *core.Limiter, *rls.Rules) {
	t.Helper()
	return rulesServerOver(t, testTiers(), cfg, limOpts, opts...)
}

// rulesServerOver serves cfg over ts on the shared Redis.
func rulesServerOver(t *testing.T, ts quota.Tiers, cfg string, limOpts []core.Option, opts ...rls.Option) (rlsv3.RateLimitServiceClient, *core.Limiter, *rls.Rules) {
	t.Helper()
	c, err := rls.ParseConfig("rules.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tiers, err := quota.NewResolver(ts)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewRules(c, tiers)
	if err != nil {
		t.Fatal(err)
	}
	limOpts = append([]core.Option{core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5 * time.Second)}, limOpts...)
	lim, err := core.New(redistest.Client(t), rules, limOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return serve(t, lim, append([]rls.Option{rls.WithRules(rules)}, opts...)...), lim, rules
}

func edge(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds}
}

func TestTenantRuleSharesTheServicesBucket(t *testing.T) {
	c, lim, _ := rulesServer(t, tenantRules, nil)
	res := ask(t, c, edge(desc("tenant", "t1")))
	st := res.GetStatuses()[0]
	// free's export: 10 burst, 0.5/s; the limit is the bucket's
	if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 9 || st.GetCurrentLimit().GetName() != "export" {
		t.Fatalf("gateway check: %v", st)
	}
	d, err := lim.Allow(context.Background(), quota.Tenant{ID: "t1"}, "export", 1)
	if err != nil || d.Remaining != 8 {
		t.Fatalf("the service's check after the gateway's: %+v, %v; want 8 left of one bucket", d, err)
	}
	// a descriptor without the tenant entry does not match the rule: no limit
	if res := ask(t, c, edge(desc("account", "t1"))); res.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("unmatched: %v", res)
	}
}

// TestTenantRuleHoldsNoSlot: without WithSlotHold a tenant rule's class
// with a concurrency limit frees the slot a hit takes at once, as without
// rules: the tenant's next request is admitted.
func TestTenantRuleHoldsNoSlot(t *testing.T) {
	ts := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"jobs": {Capacity: 100, RefillPerSecond: 100, Concurrency: 1},
	}}}}
	c, _, _ := rulesServerOver(t, ts, "domain: edge\ndescriptors:\n  - key: tenant\n    tollgate: {tenant: tenant, class: jobs}\n", nil)
	for i := range 3 {
		if st := ask(t, c, edge(desc("tenant", "t1"))).GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v; want OK, the slot of the one before freed", i, st)
		}
	}
}

// TestTenantRuleHoldsItsSlot: with WithSlotHold the tenant rule's hit
// holds its slot until its negative hit, as without rules.
func TestTenantRuleHoldsItsSlot(t *testing.T) {
	ts := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"jobs": {Capacity: 100, RefillPerSecond: 100, Concurrency: 1},
	}}}}
	c, _, _ := rulesServerOver(t, ts, "domain: edge\ndescriptors:\n  - key: tenant\n    tollgate: {tenant: tenant, class: jobs}\n",
		[]core.Option{core.WithSlotGroup("gw")}, rls.WithSlotHold(time.Minute))
	neg := desc("tenant", "t1")
	neg.IsNegativeHits = true
	for i, step := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want rlsv3.RateLimitResponse_Code
	}{
		{desc("tenant", "t1"), rlsv3.RateLimitResponse_OK},
		{desc("tenant", "t1"), rlsv3.RateLimitResponse_OVER_LIMIT},
		{neg, rlsv3.RateLimitResponse_OK}, // the denied hit's: frees nothing
		{desc("tenant", "t1"), rlsv3.RateLimitResponse_OVER_LIMIT},
		{neg, rlsv3.RateLimitResponse_OK},
		{neg, rlsv3.RateLimitResponse_OK}, // the first hit's
		{desc("tenant", "t1"), rlsv3.RateLimitResponse_OK},
	} {
		if res := ask(t, c, edge(step.d)); res.GetOverallCode() != step.want {
			t.Fatalf("step %d: %v, want %v", i, res, step.want)
		}
	}
}

func TestTierHonouredOnlyWhereTrusted(t *testing.T) {
	c, _, _ := rulesServer(t, tenantRules, nil)
	// the rule on tenant names no tier entry: a descriptor cannot pick pro
	// (it has no tier entry at that level either: it would not match)
	res := ask(t, c, edge(desc("org", "o1", "tier", "pro")))
	if st := res.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 4 {
		t.Fatalf("trusted tier pro (5 burst): %v", st)
	}
	res = ask(t, c, edge(desc("org", "o2", "tier", "free")))
	if st := res.GetStatuses()[0]; st.GetLimitRemaining() != 2 {
		t.Fatalf("trusted tier free (3 burst): %v", st)
	}
	res = ask(t, c, edge(desc("org", "o3", "tier", "platinum")))
	if st := res.GetStatuses()[0]; res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(st.GetCurrentLimit().GetName(), "unknown tier") {
		t.Fatalf("an unknown tier: %v", res)
	}
}

// labels returns every (class, tier, bucket) label set of the decisions
// counter.
func labels(t *testing.T, r *sdkmetric.ManualReader) map[string]bool {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "tollgate.decisions" {
				continue
			}
			sum, _ := m.Data.(metricdata.Sum[int64])
			for _, dp := range sum.DataPoints {
				get := func(k string) string { v, _ := dp.Attributes.Value(attribute.Key(k)); return v.AsString() }
				out[get("class")+"/"+get("tier")+"/"+get("bucket")] = true
			}
		}
	}
	return out
}

func TestMetricLabelsComeFromTheConfiguration(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	c, _, _ := rulesServer(t, tenantRules, []core.Option{core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))})
	for i := range 300 {
		v := "junk-" + strconv.Itoa(i)
		ask(t, c, edge(desc("remote_address", v)))
		ask(t, c, edge(desc("org", v, "tier", v)))
		ask(t, c, edge(desc("tenant", v)))
	}
	got := labels(t, reader)
	if len(got) > 4 {
		t.Fatalf("%d label sets after 900 junk descriptors, want at most 4: %v", len(got), got)
	}
	for l := range got {
		if strings.Contains(l, "junk") {
			t.Fatalf("a descriptor value became a label: %q", l)
		}
	}
}

func TestDescriptorLimitOverrideOnlyWhenEnabled(t *testing.T) {
	over := &ratelimitv3.RateLimitDescriptor{Entries: desc("remote_address", "1.1.1.1").Entries,
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: typev3.RateLimitUnit_MINUTE}}
	off, _, _ := rulesServer(t, tenantRules, nil)
	if st := ask(t, off, edge(over)).GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 2 || st.GetLimitRemaining() != 1 {
		t.Fatalf("override off: %v; want the rule's 2 per hour", st)
	}
	on, _, _ := rulesServer(t, tenantRules, nil, rls.WithDescriptorLimits(true))
	if st := ask(t, on, edge(over)).GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 50 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.GetLimitRemaining() != 49 {
		t.Fatalf("override on: %v; want 50 per minute", st)
	}
}

func TestGlobalShadowKeepsTheStatuses(t *testing.T) {
	c, _, _ := rulesServer(t, tenantRules, nil, rls.WithGlobalShadow(true))
	var res *rlsv3.RateLimitResponse
	for range 3 {
		res = ask(t, c, edge(desc("remote_address", "2.2.2.2")))
	}
	if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("global shadow: %v; want OK over an OVER_LIMIT status", res)
	}
	if _, err := rls.New(newLimiter(t, redistest.Client(t)), rls.WithGlobalShadow(true)); err == nil {
		t.Fatal("WithGlobalShadow without WithRules was accepted")
	}
}

func TestReloadKeepsTheOldConfigurationWhenTheNewIsInvalid(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	write := func(body string) { t.Helper(); testkit.ReplaceFile(t, file, body) }
	write("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	cfg, err := rls.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewRules(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(redistest.Client(t), rules, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	c := serve(t, lim, rls.WithRules(rules))
	var logs testkit.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := rules.Watch(ctx, dir, 100*time.Millisecond, logs.Logger())
	t.Cleanup(func() { cancel(); <-done })

	limitOf := func(value string) uint32 {
		return ask(t, c, edge(desc("k", value))).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	// every wait is bounded by a deadline far beyond the poll interval
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s; log:\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := limitOf("a"); got != 5 {
		t.Fatalf("initial limit %d, want 5", got)
	}
	write("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	waitFor("the new limit", func() bool { return limitOf("b") == 7 })
	write("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9, unit_multipler: 60}\n")
	waitFor("the invalid file logged", func() bool { return strings.Contains(logs.String(), "unit_multipler") })
	if got := limitOf("c"); got != 7 {
		t.Fatalf("after an invalid file the limit is %d, want the previous 7", got)
	}
}

// Descriptors on one tag (here one tenant's export and default buckets)
// are one script call, all or nothing, whatever their costs: a denial of
// one leaves the other uncharged (the reference charges it: the documented
// difference).
func TestOneTagAllOrNothingWhateverTheCosts(t *testing.T) {
	c, lim, _ := rulesServer(t, tenantRules, nil)
	ctx := context.Background()
	left := func(tenant, class string) int64 {
		t.Helper()
		d, err := lim.Peek(ctx, quota.Tenant{ID: tenant}, class)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	cost := func(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	// equal costs: default (3 burst) cannot take 4, so export (10) is not charged either
	res := ask(t, c, edge(cost(4, desc("tenant", "a1")), cost(4, desc("user", "a1"))))
	if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || left("a1", "export") != 10 || left("a1", "default") != 3 {
		t.Fatalf("equal costs: %v; export %d, default %d left, want 10 and 3 (nothing charged)", res, left("a1", "export"), left("a1", "default"))
	}
	// different costs: export cannot take 11, so default's 1 is not charged either
	res = ask(t, c, edge(cost(11, desc("tenant", "a2")), cost(1, desc("user", "a2"))))
	if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || left("a2", "export") != 10 || left("a2", "default") != 3 {
		t.Fatalf("different costs: %v; export %d, default %d left, want 10 and 3 (nothing charged)", res, left("a2", "export"), left("a2", "default"))
	}
	if st := res.GetStatuses(); st[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st[1].GetCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("codes %v %v, want OVER_LIMIT for export and OK for default, as the reference", st[0].GetCode(), st[1].GetCode())
	}
}
