package rls

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

func entries(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestConfigMatchesAsTheReference(t *testing.T) {
	cfg, err := LoadConfig("testdata/readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		path string // "" = no rule
		rpu  uint32
	}{
		{entries("message_type", "marketing", "to_number", "206"), "readme.message_type_marketing.to_number", 5},
		{entries("to_number", "206"), "readme.to_number", 100},
		{entries("message_type", "marketing"), "", 0},                                // placeholder level: no limit
		{entries("message_type", "other", "to_number", "206"), "", 0},                // no such value, no key-only rule
		{entries("remote_address", "50.0.0.1"), "readme.remote_address", 10},         // key only
		{entries("remote_address", "50.0.0.5"), "readme.remote_address_50.0.0.5", 0}, // most specific wins
		{entries("remote_address", "50.0.0.1", "extra", "x"), "", 0},                 // deeper than the rule
		{entries("service", "auth", "user", "user-a"), "readme.service.user_user-a", 2},
		{entries("path", "value-anything"), "readme.path_value*", 4},
		{entries("path", "other"), "", 0},
		{entries("files", "files/a.pdf"), "readme.files_files/*", 10},
		{entries("unknown", "x"), "", 0},
	} {
		r, _ := cfg.match("readme", tc.d)
		switch {
		case tc.path == "" && r != nil:
			t.Errorf("%v: matched %s, want no rule", tc.d, r.path)
		case tc.path != "" && r == nil:
			t.Errorf("%v: no rule, want %s", tc.d, tc.path)
		case r != nil && (r.path != tc.path || r.limit.RequestsPerUnit != tc.rpu):
			t.Errorf("%v: matched %s (%d), want %s (%d)", tc.d, r.path, r.limit.RequestsPerUnit, tc.path, tc.rpu)
		}
	}
	if r, _ := cfg.match("other-domain", entries("to_number", "1")); r != nil {
		t.Errorf("an unknown domain matched %s", r.path)
	}
	// share_threshold: every match shares one identity; without it each value has its own
	_, s1 := cfg.match("readme", entries("files", "files/a.pdf"))
	_, s2 := cfg.match("readme", entries("files", "files/b.csv"))
	if a, b := bucketID("readme", entries("files", "files/a.pdf"), s1), bucketID("readme", entries("files", "files/b.csv"), s2); a != b {
		t.Errorf("share_threshold: %q and %q differ", a, b)
	}
	_, n1 := cfg.match("readme", entries("files_no_share", "files_no_share/a.pdf"))
	_, n2 := cfg.match("readme", entries("files_no_share", "files_no_share/b.pdf"))
	if a, b := bucketID("readme", entries("files_no_share", "files_no_share/a.pdf"), n1), bucketID("readme", entries("files_no_share", "files_no_share/b.pdf"), n2); a == b {
		t.Errorf("without share_threshold two values share %q", a)
	}
	// units and quotas: capacity = requests_per_unit, refilled over the unit
	r, _ := cfg.match("readme", entries("azure", "x"))
	if r.quota != (quota.Quota{Capacity: 100, RefillPerSecond: 100.0 / 60}) || r.limit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("azure: %+v %v", r.quota, r.limit)
	}
	if r, _ := cfg.match("readme", entries("ldap", "x")); r == nil || !r.unlimited {
		t.Errorf("ldap: want unlimited, got %+v", r)
	}
	for class, ru := range cfg.rules {
		if err := quota.ValidateName(class); err != nil || !strings.HasPrefix(class, ruleClassPrefix) || ru.class != class {
			t.Errorf("class %q: %v", class, err)
		}
	}
}

func TestBucketIDIsInjectiveAndBounded(t *testing.T) {
	a := bucketID("d", entries("k", "a|k=b"), nil)
	b := bucketID("d", entries("k", "a", "k", "b"), nil)
	if a == b {
		t.Errorf("%q: two descriptors share a bucket", a)
	}
	long := bucketID("d", entries("k", strings.Repeat("x", 1000)), nil)
	if len(long) > quota.MaxTenantIDLen || long == bucketID("d", entries("k", strings.Repeat("x", 999)), nil) {
		t.Errorf("long value: %q", long)
	}
}

func TestConfigRefusesWhatTheReferenceRefuses(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unit_multipler: 60, requests_per_unit: 1}\n", `x.yaml:4: unknown key "unit_multipler"`},
		{"domain: d\ndescriptors:\n  - key: k\n    valu: v\n", `x.yaml:4: unknown key "valu"`},
		{"domain: d\nfoo: 1\n", `x.yaml:2: unknown key "foo"`},
		{"descriptors: []\n", "empty domain"},
		{"domain: d\ndescriptors:\n  - value: v\n", "x.yaml:3: descriptor has empty key"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n", "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "duplicate descriptor composite key 'd.k'"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold can only be used with wildcard"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", "replaces should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - key: k\n    tollgate: {tier: tier}\n", "tenant (the descriptor entry holding the tenant ID) is required"},
		{"domain: d\ndescriptors:\n  - key: k\n    tollgate: {tenant: k}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "remove its rate_limit"},
		{"domain: d\n---\ndomain: e\n", "more than one YAML document"},
	} {
		_, err := ParseConfig("x.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"a.yaml": "domain: d\n", "b.yml": "domain: d\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("a domain in two files: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("domain: d\n#"+strings.Repeat("x", maxConfigBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an unbounded file: %v", err)
	}
}

func TestGrouperBoundsCallsAndNeverSplitsABucket(t *testing.T) {
	var gr grouper[string]
	for i := range 20 {
		gr.add("t", quota.Tenant{ID: "t"}, 1, "c"+string(rune('a'+i)), i)
	}
	gr.add("t", quota.Tenant{ID: "t"}, 1, "ca", 20) // a class of the first call again
	gr.add("u", quota.Tenant{ID: "u"}, 1, "ca", 21)
	if len(gr.groups) != 3 || len(gr.groups[0].classes) != maxClassesPerCall || len(gr.groups[1].classes) != 4 {
		t.Fatalf("groups: %d, classes %d and %d; want 16 + 4 for t, one for u", len(gr.groups), len(gr.groups[0].classes), len(gr.groups[1].classes))
	}
	if m := gr.groups[0].members; m[len(m)-1] != 20 {
		t.Errorf("the repeated class went to another call: %v", m)
	}
}

func TestGrouperOneCallWhateverTheCosts(t *testing.T) {
	var gr grouper[string]
	tn := quota.Tenant{ID: "t"}
	gr.add("t", tn, 1, "a", 0)
	gr.add("t", tn, 5, "b", 1)
	gr.add("t", tn, 2, "a", 2) // a again at another cost: adds
	gr.add("t", tn, 2, "a", 3) // and at that cost again: the same claim
	gr.add("t", tn, 5, "b", 4) // b again at its cost: charged once
	if len(gr.groups) != 1 {
		t.Fatalf("groups: %d, want one call for the tenant whatever the costs", len(gr.groups))
	}
	g := gr.groups[0]
	if !slices.Equal(g.classes, []string{"a", "b"}) || !slices.Equal(g.costs, []int64{3, 5}) || len(g.members) != 5 {
		t.Fatalf("classes %v costs %v members %v; want a 3 and b 5 over 5 descriptors", g.classes, g.costs, g.members)
	}
	if req := g.request(); req.Cost != 3 || !slices.Equal(req.AlsoCosts, []int64{5}) {
		t.Errorf("request = %+v, want cost 3 and AlsoCosts [5]", req)
	}
	var eq grouper[string]
	eq.add("t", tn, 2, "a", 0)
	eq.add("t", tn, 2, "b", 1)
	if req := eq.groups[0].request(); req.Cost != 2 || req.AlsoCosts != nil {
		t.Errorf("equal costs: %+v, want AlsoCosts nil (the one-cost path)", req)
	}
}

// TestUnitMultiplier: the reference's unit_multiplier stretches the window
// (20 per 10 seconds: 20 burst, 2/s); the limit reported stays the one
// written (20 per SECOND, as the reference's message has no multiplier);
// a negative multiplier is refused.
func TestUnitMultiplier(t *testing.T) {
	cfg, err := ParseConfig("m.yaml", []byte("domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 20}\n  - key: b\n    rate_limit: {unit: minute, unit_multiplier: 1, requests_per_unit: 6}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := cfg.match("m", entries("a", "x"))
	if r == nil || r.quota != (quota.Quota{Capacity: 20, RefillPerSecond: 2}) || r.limit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND || r.limit.RequestsPerUnit != 20 {
		t.Errorf("a: %+v", r)
	}
	if r, _ := cfg.match("m", entries("b", "x")); r == nil || r.quota != (quota.Quota{Capacity: 6, RefillPerSecond: 0.1}) {
		t.Errorf("b: %+v", r)
	}
	if _, err := ParseConfig("m.yaml", []byte("domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unit_multiplier: -1, requests_per_unit: 20}\n")); err == nil {
		t.Error("a negative unit_multiplier loaded")
	}
}
