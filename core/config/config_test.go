package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func example(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/tiers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseExample(t *testing.T) {
	cfg, err := config.Load("testdata/tiers.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {
			Ceiling: &quota.Quota{Capacity: 100, RefillPerSecond: 5},
			Classes: map[string]quota.Quota{
				"default": {Capacity: 20, RefillPerSecond: 2},
				"export":  {Capacity: 10, RefillPerSecond: 0.1},
			},
		},
		"pro": {Classes: map[string]quota.Quota{
			"default": {Capacity: 200, RefillPerSecond: 50},
			"export":  {Capacity: 50, RefillPerSecond: 1},
		}},
	}}
	if !reflect.DeepEqual(cfg.Tiers, want) {
		t.Errorf("Tiers = %+v\nwant %+v", cfg.Tiers, want)
	}
	if cfg.Source != "testdata/tiers.yaml" || cfg.Version != 1 || cfg.KeyPrefix != "rl" ||
		cfg.FailurePolicy != core.FailOpen || cfg.Timeout != 100*time.Millisecond ||
		cfg.CacheTTL != 45*time.Second || cfg.HeaderStyle != render.DefaultHeaderStyle {
		t.Errorf("settings = %+v", cfg)
	}
	wantRoutes := gate.Routes{
		"GET /v1/profile": {Class: "default", Cost: 1},
		"POST /v1/export": {Class: "export", Cost: 5},
		"/v1/health":      {Class: "default", Cost: 1},
	}
	if !reflect.DeepEqual(cfg.Routes, wantRoutes) {
		t.Errorf("Routes = %+v\nwant %+v", cfg.Routes, wantRoutes)
	}
	wantMethods := gate.Routes{
		"/acme.v1.Reports/Export":  {Class: "export", Cost: 5},
		"/acme.v1.Profile/*":       {Class: "default", Cost: 1},
		"/grpc.health.v1.Health/*": {Exempt: true},
	}
	if !reflect.DeepEqual(cfg.GRPCMethods, wantMethods) {
		t.Errorf("GRPCMethods = %+v\nwant %+v", cfg.GRPCMethods, wantMethods)
	}
	r, err := cfg.NewResolver()
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	bs, err := r.Buckets(t.Context(), quota.Tenant{ID: "t1"}, "export")
	if err != nil || len(bs) != 2 || bs[0].Quota.Capacity != 10 || bs[1].Name != quota.CeilingBucket {
		t.Errorf("Buckets = %+v, %v", bs, err)
	}
	// prefix, policy, timeout, deny cache, shadow, batching, breaker,
	// local fallback, shadow classes, one lease
	if len(cfg.LimiterOptions()) != 10 || len(cfg.ResolverOptions()) != 1 {
		t.Errorf("LimiterOptions = %d, ResolverOptions = %d", len(cfg.LimiterOptions()), len(cfg.ResolverOptions()))
	}
}

// header_style takes a name, a list of names or a comma-separated string,
// case-insensitive, and the aliases of each name.
// concurrency: N sits beside capacity and refill, in a class or the ceiling.
func TestParseConcurrency(t *testing.T) {
	src := strings.Replace(example(t), "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, concurrency: 2}", 1)
	cfg, err := config.Parse("tiers.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Tiers.Tiers["free"].Classes["export"]; q != (quota.Quota{Capacity: 10, RefillPerSecond: 0.1, Concurrency: 2}) {
		t.Fatalf("export = %+v", q)
	}
	if q := cfg.Tiers.Tiers["free"].Classes["default"]; q.Concurrency != 0 {
		t.Fatalf("default = %+v; want no concurrency limit", q)
	}
}

// max_debt and max_settle_ratio sit beside capacity and refill, in a class
// or the ceiling.
func TestParseSettleSettings(t *testing.T) {
	src := strings.Replace(example(t), "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_debt: 50, max_settle_ratio: 4}", 1)
	cfg, err := config.Parse("tiers.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Tiers.Tiers["free"].Classes["export"]; q != (quota.Quota{Capacity: 10, RefillPerSecond: 0.1, MaxDebt: 50, MaxSettleRatio: 4}) {
		t.Fatalf("export = %+v", q)
	}
	if q := cfg.Tiers.Tiers["free"].Classes["default"]; q.MaxDebt != 0 || q.MaxSettleRatio != 0 {
		t.Fatalf("default = %+v; want the debt carried in full, any actual cost settled", q)
	}
}

func TestParseHeaderStyle(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want render.HeaderStyle
	}{
		{"ietf", render.HeaderIETF},
		{"draft-11", render.HeaderIETF},
		{"X-RateLimit", render.HeaderXRateLimit},
		{"epoch", render.HeaderXRateLimitEpoch},
		{"[draft06, x-ratelimit-epoch]", render.HeaderDraft06 | render.HeaderXRateLimitEpoch},
		{`"ietf, xratelimit"`, render.HeaderIETF | render.HeaderXRateLimit},
		{"default", render.DefaultHeaderStyle},
		{"[default, draft-06]", render.DefaultHeaderStyle | render.HeaderDraft06},
		{"none", render.HeaderNone},
	} {
		cfg, err := config.Parse("hs.yaml", []byte("default_tier: a\ntiers:\n  a:\n    classes:\n      default: {capacity: 1, refill_per_second: 1}\nheader_style: "+tc.yaml+"\n"))
		if err != nil {
			t.Errorf("header_style: %s: %v", tc.yaml, err)
			continue
		}
		if cfg.HeaderStyle != tc.want {
			t.Errorf("header_style: %s = %#x, want %#x", tc.yaml, uint(cfg.HeaderStyle), uint(tc.want))
		}
	}
}

func TestParseDefaultsAndVariants(t *testing.T) {
	cfg, err := config.Parse("min.yaml", []byte(`
default_tier: basic
tiers:
  base: &classes
    classes:
      default: {capacity: 5, refill_per_second: 1}
  basic: *classes
header_style: [ietf, draft-06]
failure_policy: closed
anonymous_tier: base
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.KeyPrefix != core.DefaultPrefix || cfg.Timeout != core.DefaultTimeout || cfg.CacheTTL != quota.DefaultCacheTTL {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	if cfg.HeaderStyle != render.HeaderIETF|render.HeaderDraft06 || cfg.FailurePolicy != core.FailClosed {
		t.Errorf("header style %v, policy %v", cfg.HeaderStyle, cfg.FailurePolicy)
	}
	if cfg.AnonymousTier != "base" || len(cfg.Routes) != 0 || len(cfg.GRPCMethods) != 0 {
		t.Errorf("anonymous tier %q, routes %v, gRPC methods %v", cfg.AnonymousTier, cfg.Routes, cfg.GRPCMethods)
	}
	if q := cfg.Tiers.Tiers["basic"].Classes["default"]; q.Capacity != 5 {
		t.Errorf("alias not followed: %+v", cfg.Tiers.Tiers)
	}
}

// TestParseErrors breaks every field of the example in turn. Each case must
// produce exactly one error, naming the file, the line and the field.
func TestParseErrors(t *testing.T) {
	base := example(t)
	cases := []struct {
		name     string
		old, new string // replace old by new in the example ("" old: replace whole file)
		want     string
	}{
		{"version unsupported", "version: 1", "version: 2", "tiers.yaml:2: version: unsupported schema version 2"},
		{"version not an integer", "version: 1", "version: one", `tiers.yaml:2: version: must be an integer, got "one"`},
		{"default tier undefined", "default_tier: free", "default_tier: gold", `tiers.yaml:3: default_tier: tier "gold" is not defined under tiers`},
		{"default tier missing", "default_tier: free\n", "", "tiers.yaml:2: default_tier: is required"},
		{"default tier not a value", "default_tier: free", "default_tier: [free]", "tiers.yaml:3: default_tier: must be a value, got a list"},
		{"key prefix bad byte", "key_prefix: rl", `key_prefix: "r l"`, `tiers.yaml:4: key_prefix: key prefix "r l" has byte ' ' at 1`},
		{"key prefix empty", "key_prefix: rl", `key_prefix: ""`, "tiers.yaml:4: key_prefix: key prefix must be 1 to 64 bytes, got 0"},
		{"failure policy", "failure_policy: open", "failure_policy: sometimes", `tiers.yaml:5: failure_policy: must be open or closed, got "sometimes"`},
		{"timeout not a duration", "timeout: 100ms", "timeout: fast", `tiers.yaml:6: timeout: must be a duration such as 100ms, 2s or 1m, got "fast"`},
		{"timeout bare number", "timeout: 100ms", "timeout: 100", `tiers.yaml:6: timeout: must be a duration such as 100ms, 2s or 1m, got "100"`},
		{"timeout negative", "timeout: 100ms", "timeout: -1s", "tiers.yaml:6: timeout: must be > 0 and <= 1m0s, got -1s"},
		{"timeout too long", "timeout: 100ms", "timeout: 2m", "tiers.yaml:6: timeout: must be > 0 and <= 1m0s, got 2m0s"},
		{"cache ttl zero", "cache_ttl: 45s", "cache_ttl: 0s", "tiers.yaml:7: cache_ttl: must be > 0 and <= 24h0m0s, got 0s"},
		{"header style unknown", "header_style: default", "header_style: fancy", `tiers.yaml:8: header_style: unknown header style "fancy"`},
		{"header style list item", "header_style: default", "header_style: [ietf, {a: b}]", "tiers.yaml:8: header_style[1]: must be a value, got a mapping"},
		{"unknown top-level field", "version: 1", "version: 1\ncolour: blue", "tiers.yaml:3: colour: unknown field (want one of version, default_tier, anonymous_tier, tiers,"},
		{"tiers not a mapping", "", "default_tier: free\ntiers: []\n", "tiers.yaml:2: tiers: must be a mapping, got a list"},
		{"tiers empty", "", "default_tier: free\ntiers: {}\n", "tiers.yaml:2: tiers: must define at least one tier"},
		{"tier name bad", "  pro:\n", "  pro plus:\n", `tiers.yaml:15: tiers.pro plus: bad name: bucket name "pro plus" has byte ' ' at 3`},
		{"tier unknown field", "  pro:\n    classes:", "  pro:\n    ceilng: {capacity: 1, refill_per_second: 1}\n    classes:", "tiers.yaml:16: tiers.pro.ceilng: unknown field (want one of classes, ceiling)"},
		{"tier without classes", "", "default_tier: free\ntiers:\n  free:\n    ceiling: {capacity: 1, refill_per_second: 1}\n", "tiers.yaml:4: tiers.free.classes: is required"},
		{"tier not a mapping", "  pro:\n    classes:\n      default: {capacity: 200, refill_per_second: 50}\n      export: {capacity: 50, refill_per_second: 1}\n", "  pro: 3\n", `tiers.yaml:15: tiers.pro: must be a mapping, got "3"`},
		{"tier classes empty", "    classes:\n      default: {capacity: 200, refill_per_second: 50}\n      export: {capacity: 50, refill_per_second: 1}\n", "    classes: {}\n", "tiers.yaml:16: tiers.pro.classes: must define at least one class"},
		{"class reserved", "      export: {capacity: 50,", "      tenant: {capacity: 50,", `tiers.yaml:18: tiers.pro.classes.tenant: class name "tenant" is reserved`},
		{"class bad name", "      export: {capacity: 50,", "      ex/port: {capacity: 50,", `tiers.yaml:18: tiers.pro.classes.ex/port: bad name: bucket name "ex/port" has byte '/' at 2`},
		{"class defined twice", "      export: {capacity: 10, refill_per_second: 0.1}", "      export: {capacity: 10, refill_per_second: 0.1}\n      export: {capacity: 11, refill_per_second: 0.1}", "tiers.yaml:15: tiers.free.classes.export: defined twice (first at line 14)"},
		{"capacity negative", "export: {capacity: 10,", "export: {capacity: -1,", "tiers.yaml:14: tiers.free.classes.export.capacity: must be > 0, got -1"},
		{"capacity zero", "export: {capacity: 10,", "export: {capacity: 0,", "tiers.yaml:14: tiers.free.classes.export.capacity: must be > 0, got 0"},
		{"capacity fractional", "export: {capacity: 10,", "export: {capacity: 2.5,", `tiers.yaml:14: tiers.free.classes.export.capacity: must be an integer, got "2.5"`},
		{"capacity string", "export: {capacity: 10,", "export: {capacity: lots,", `tiers.yaml:14: tiers.free.classes.export.capacity: must be an integer, got "lots"`},
		{"capacity too large", "export: {capacity: 10,", "export: {capacity: 2000000000000,", "tiers.yaml:14: tiers.free.classes.export.capacity: must be <= 1099511627776, got 2000000000000"},
		{"capacity overflows", "export: {capacity: 10,", "export: {capacity: 99999999999999999999,", `tiers.yaml:14: tiers.free.classes.export.capacity: must be an integer, got "99999999999999999999"`},
		{"capacity missing", "export: {capacity: 10, refill_per_second: 0.1}", "export: {refill_per_second: 0.1}", "tiers.yaml:14: tiers.free.classes.export.capacity: is required"},
		{"concurrency zero", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, concurrency: 0}", "tiers.yaml:14: tiers.free.classes.export.concurrency: must be >= 1 (omit it for no concurrency limit), got 0"},
		{"concurrency too large", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, concurrency: 100001}", "tiers.yaml:14: tiers.free.classes.export.concurrency: must be <= 100000, got 100001"},
		{"concurrency on class and ceiling", "ceiling: {capacity: 100, refill_per_second: 5}\n    classes:\n      default: {capacity: 20, refill_per_second: 2}", "ceiling: {capacity: 100, refill_per_second: 5, concurrency: 9}\n    classes:\n      default: {capacity: 20, refill_per_second: 2, concurrency: 2}", "tiers.yaml:11: tiers.free.classes.default.concurrency: the ceiling has a concurrency limit too"},
		{"max debt zero", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_debt: 0}", "tiers.yaml:14: tiers.free.classes.export.max_debt: must be >= 1 (omit it to carry a debt in full), got 0"},
		{"max debt too large", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_debt: 1099511627777}", "tiers.yaml:14: tiers.free.classes.export.max_debt: must be <= 1099511627776, got 1099511627777"},
		{"max debt fractional", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_debt: 2.5}", `tiers.yaml:14: tiers.free.classes.export.max_debt: must be an integer, got "2.5"`},
		{"max settle ratio below 1", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_settle_ratio: 0.5}", "tiers.yaml:14: tiers.free.classes.export.max_settle_ratio: must be >= 1 (omit it to settle any actual cost), got 0.5"},
		{"max settle ratio NaN", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_settle_ratio: .nan}", "tiers.yaml:14: tiers.free.classes.export.max_settle_ratio: must be finite, got NaN"},
		{"max settle ratio too large", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10, refill_per_second: 0.1, max_settle_ratio: 1e10}", "tiers.yaml:14: tiers.free.classes.export.max_settle_ratio: must be <= 1e+09, got 1e+10"},
		{"rate negative", "refill_per_second: 0.1}", "refill_per_second: -1}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be > 0, got -1"},
		{"rate zero", "refill_per_second: 0.1}", "refill_per_second: 0}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be > 0, got 0"},
		{"rate NaN", "refill_per_second: 0.1}", "refill_per_second: .nan}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be finite, got NaN"},
		{"rate infinite", "refill_per_second: 0.1}", "refill_per_second: .inf}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be finite, got +Inf"},
		{"rate too large", "refill_per_second: 0.1}", "refill_per_second: 1e13}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be <= 1e+12, got 1e+13"},
		{"rate not a number", "refill_per_second: 0.1}", `refill_per_second: "0.1"}`, `tiers.yaml:14: tiers.free.classes.export.refill_per_second: must be a number, got "0.1"`},
		{"rate missing", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10}", "tiers.yaml:14: tiers.free.classes.export.refill_per_second: is required"},
		{"fill time too long", "export: {capacity: 10, refill_per_second: 0.1}", "export: {capacity: 10000000, refill_per_second: 0.01}", "tiers.yaml:14: tiers.free.classes.export: capacity/refill rate (time to refill) must be <= 9600h0m0s"},
		{"quota unknown field", "export: {capacity: 10,", "export: {burst: 3, capacity: 10,", "tiers.yaml:14: tiers.free.classes.export.burst: unknown field (want one of capacity, refill_per_second, concurrency, max_debt, max_settle_ratio)"},
		{"quota not a mapping", "export: {capacity: 10, refill_per_second: 0.1}", "export: 10", `tiers.yaml:14: tiers.free.classes.export: must be a mapping, got "10"`},
		{"ceiling capacity", "ceiling: {capacity: 100,", "ceiling: {capacity: 0,", "tiers.yaml:11: tiers.free.ceiling.capacity: must be > 0, got 0"},
		{"merge key", "  pro:\n    classes:", "  pro:\n    <<: {}\n    classes:", "tiers.yaml:16: tiers.pro.<<: merge keys (<<) are not supported"},
		{"routes not a list", "", "default_tier: a\ntiers: {a: {classes: {x: {capacity: 1, refill_per_second: 1}}}}\nroutes: {}\n", "tiers.yaml:3: routes: must be a list, got a mapping"},
		{"grpc methods not a list", "", "default_tier: a\ntiers: {a: {classes: {x: {capacity: 1, refill_per_second: 1}}}}\ngrpc_methods: 3\n", `tiers.yaml:3: grpc_methods: must be a list, got "3"`},
		{"route method lower case", "{method: GET, path: /v1/profile", "{method: get, path: /v1/profile", `tiers.yaml:20: routes[0].method: must be an upper-case HTTP method or *, got "get" (methods are case-sensitive: did you mean GET?)`},
		{"route method missing", "{method: GET, path: /v1/profile", "{path: /v1/profile", "tiers.yaml:20: routes[0].method: is required"},
		{"route path relative", "path: /v1/profile,", "path: v1/profile,", `tiers.yaml:20: routes[0].path: must start with / and hold no spaces`},
		{"route path missing", "{method: GET, path: /v1/profile,", "{method: GET,", "tiers.yaml:20: routes[0].path: is required"},
		{"route class undefined", "path: /v1/profile, class: default", "path: /v1/profile, class: bulk", `tiers.yaml:20: routes[0].class: class "bulk" is not defined in tier "free"`},
		{"route class missing", "path: /v1/profile, class: default,", "path: /v1/profile,", "tiers.yaml:20: routes[0].class: is required"},
		{"route cost zero", "class: default, cost: 1}", "class: default, cost: 0}", "tiers.yaml:20: routes[0].cost: must be 1 to 1099511627776, got 0"},
		{"route cost over capacity", "class: export, cost: 5}\n  - {method: \"*\"", "class: export, cost: 11}\n  - {method: \"*\"", `tiers.yaml:21: routes[1].cost: cost 11 exceeds capacity 10 of class "export" in tier "free": such a request could never be admitted`},
		{"route unknown field", "{method: GET, path: /v1/profile,", "{verb: GET, method: GET, path: /v1/profile,", "tiers.yaml:20: routes[0].verb: unknown field (want one of method, path, class, cost, exempt)"},
		{"route twice", "  - {method: POST, path: /v1/export", "  - {method: GET, path: /v1/profile, class: export}\n  - {method: POST, path: /v1/export", "tiers.yaml:21: routes[1]: GET /v1/profile is already mapped at line 20"},
		{"route not a mapping", "  - {method: GET, path: /v1/profile, class: default, cost: 1}", "  - GET /v1/profile", `tiers.yaml:20: routes[0]: must be a mapping, got "GET /v1/profile"`},
		{"grpc method malformed", "{method: /acme.v1.Reports/Export,", "{method: Export,", `tiers.yaml:24: grpc_methods[0].method: must be /package.Service/Method or /package.Service/*, got "Export"`},
		{"grpc cost not an integer", "class: export, cost: 5}\n  - {method: /acme", "class: export, cost: five}\n  - {method: /acme", `tiers.yaml:24: grpc_methods[0].cost: must be an integer, got "five"`},
		{"grpc twice", "{method: /acme.v1.Profile/*", "{method: /acme.v1.Reports/Export", "tiers.yaml:25: grpc_methods[1]: /acme.v1.Reports/Export is already mapped at line 24"},
		{"grpc unknown field", "{method: /acme.v1.Profile/*,", "{method: /acme.v1.Profile/*, path: /x,", "tiers.yaml:25: grpc_methods[1].path: unknown field (want one of method, class, cost, exempt)"},
		{"grpc method with two slashes", "{method: /acme.v1.Reports/Export,", "{method: /acme.v1.Reports/Export/x,", `tiers.yaml:24: grpc_methods[0].method: must be /package.Service/Method or /package.Service/*, got "/acme.v1.Reports/Export/x"`},
		{"route any method twice", "{method: \"*\", path: /v1/health", "{method: \"*\", path: /v1/export, class: export}\n  - {method: \"*\", path: /v1/export", `tiers.yaml:23: routes[3]: * /v1/export is already mapped at line 22`},
		{"route and gRPC method share a key", "{method: \"*\", path: /v1/health", "{method: \"*\", path: /acme.v1.Reports/Export", "tiers.yaml:24: grpc_methods[0]: /acme.v1.Reports/Export is already mapped at line 22"},
		{"exempt with a class", "{method: /grpc.health.v1.Health/*, exempt: true}", "{method: /grpc.health.v1.Health/*, exempt: true, class: default}", "tiers.yaml:26: grpc_methods[2].class: an exempt route is never charged: remove class or exempt"},
		{"exempt not a bool", "exempt: true}", "exempt: yes please}", `tiers.yaml:26: grpc_methods[2].exempt: must be true or false, got "yes please"`},
		{"exempt false needs a class", "{method: /grpc.health.v1.Health/*, exempt: true}", "{method: /grpc.health.v1.Health/*, exempt: false}", "tiers.yaml:26: grpc_methods[2].class: is required (or exempt: true)"},
		{"anonymous tier undefined", "default_tier: free", "default_tier: free\nanonymous_tier: guest", `tiers.yaml:4: anonymous_tier: tier "guest" is not defined under tiers`},
		{"tab indentation", "  free:\n", "\tfree:\n", "tiers.yaml:10: invalid YAML: found character that cannot start any token"},
		{"two documents", "", "default_tier: a\n---\ndefault_tier: b\n", "tiers.yaml:2: more than one YAML document; want one"},
		{"empty file", "", "", "tiers.yaml: file is empty"},
		{"only a comment", "", "# nothing\n", "tiers.yaml: file is empty"},
		{"root is a list", "", "- a\n- b\n", "tiers.yaml:1: must be a mapping, got a list"},
		{"root is a scalar", "", "hello\n", `tiers.yaml:1: must be a mapping, got "hello"`},
		{"no tiers", "", "default_tier: free\n", "tiers.yaml:1: tiers: is required: define at least one tier"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.new
			if tc.old != "" {
				if !strings.Contains(base, tc.old) {
					t.Fatalf("test case: example has no %q", tc.old)
				}
				src = strings.Replace(base, tc.old, tc.new, 1)
			}
			cfg, err := config.Parse("tiers.yaml", []byte(src))
			if err == nil {
				t.Fatalf("Parse accepted the file:\n%s\ncfg = %+v", src, cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a Config with an error")
			}
			if !errors.Is(err, core.ErrInvalidConfig) {
				t.Errorf("error does not wrap core.ErrInvalidConfig: %v", err)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error is %T, want *config.Error", err)
			}
			if len(ce.Errs) != 1 {
				t.Errorf("want exactly one error, got %d:\n%v", len(ce.Errs), err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error:\n  %v\nwant it to start with:\n  %s", err, tc.want)
			}
		})
	}
}

// TestParseYAMLSyntaxError: a syntax error is reported with its line, as
// a config error; the YAML library decides how many problems it sees.
func TestParseYAMLSyntaxError(t *testing.T) {
	src := strings.Replace(example(t), "tiers:\n  free:", "tiers:\n  free: [\n", 1)
	_, err := config.Parse("tiers.yaml", []byte(src))
	var ce *config.Error
	if !errors.As(err, &ce) || !errors.Is(err, core.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "tiers.yaml:") ||
		!strings.Contains(err.Error(), "invalid YAML") {
		t.Fatalf("Parse = %v", err)
	}
}

func TestParseReportsEveryError(t *testing.T) {
	src := strings.NewReplacer(
		"export: {capacity: 10,", "export: {capacity: -1,",
		"failure_policy: open", "failure_policy: maybe",
		"path: /v1/profile,", "path: v1,",
	).Replace(example(t))
	_, err := config.Parse("tiers.yaml", []byte(src))
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Errs) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
	lines := []int{5, 14, 20}
	for i, fe := range ce.Errs {
		if fe.Line != lines[i] {
			t.Errorf("error %d at line %d, want %d: %v", i, fe.Line, lines[i], fe)
		}
	}
}

// A route naming an unknown class is reported in the same run as a bad
// quota elsewhere in the tiers, not only once the tiers are fixed; a bad
// quota of a class the routes name is still reported once, not again by
// each route.
func TestParseReportsRouteErrorsWithTierErrors(t *testing.T) {
	src := strings.NewReplacer(
		"export: {capacity: 10,", "export: {capacity: -1,",
		"path: /v1/profile, class: default", "path: /v1/profile, class: bulk",
	).Replace(example(t))
	_, err := config.Parse("tiers.yaml", []byte(src))
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Errs) != 2 {
		t.Fatalf("want 2 errors, got %v", err)
	}
	for i, want := range []string{
		"tiers.yaml:14: tiers.free.classes.export.capacity: must be > 0, got -1",
		`tiers.yaml:20: routes[0].class: class "bulk" is not defined in tier "free"`,
	} {
		if !strings.HasPrefix(ce.Errs[i].Error(), want) {
			t.Errorf("error %d:\n  %v\nwant it to start with:\n  %s", i, ce.Errs[i], want)
		}
	}
	src = strings.Replace(example(t), "  free:\n", "  free:\n    ceiling: {capacity: 0, refill_per_second: 1}\n", 1)
	src = strings.Replace(src, "    ceiling: {capacity: 100, refill_per_second: 5}\n", "", 1)
	src = strings.Replace(src, "default_tier: free", "default_tier: gold", 1)
	_, err = config.Parse("tiers.yaml", []byte(src))
	if !errors.As(err, &ce) || len(ce.Errs) != 2 || !strings.Contains(err.Error(), `default_tier: tier "gold" is not defined`) {
		t.Fatalf("want the ceiling and the default tier reported, got %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", config.MaxFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope.yaml"), "no such file"},
		{"directory", dir, "not a regular file"},
		{"too big", big, "larger than 1048576"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrInvalidConfig) {
				t.Errorf("Load(%s) = %v, want an ErrInvalidConfig containing %q", tc.path, err, tc.want)
			}
		})
	}
}

// FuzzParse: any input either parses into a configuration core accepts, or
// fails with a config error naming the file; it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example(f)))
	f.Add([]byte("default_tier: a\ntiers: {a: {classes: {x: {capacity: 1, refill_per_second: 1}}}}"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("tiers: &t {a: *t}\n"))
	f.Add([]byte("<<: {}\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("tiers: {a: {classes: {x: {capacity: 0x10, refill_per_second: 1_0}}}}\ndefault_tier: a\nroutes: [{method: GET, path: /, class: x, cost: 16}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatal("config and error both returned")
			}
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("bad error: %v", err)
			}
			return
		}
		if err := cfg.Tiers.Validate(); err != nil {
			t.Fatalf("accepted tiers core rejects: %v", err)
		}
		if _, err := cfg.NewResolver(); err != nil {
			t.Fatalf("NewResolver: %v", err)
		}
		for k := range cfg.GRPCMethods {
			if _, dup := cfg.Routes[k]; dup {
				t.Fatalf("key %q in both routes and grpc_methods", k)
			}
		}
		if err := cfg.GRPCMethods.Validate(); err != nil {
			t.Fatalf("accepted gRPC methods core rejects: %v", err)
		}
		if err := cfg.Routes.Validate(); err != nil {
			t.Fatalf("accepted routes core rejects: %v", err)
		}
	})
}

// TestDocsExample keeps the full example in docs/quotas.md valid, and equal
// to testdata/tiers.yaml's settings.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/quotas.md")
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/quotas.md has no yaml block")
	}
	got, err := config.Parse("docs/quotas.md", []byte(block))
	if err != nil {
		t.Fatalf("the example in docs/quotas.md is invalid:\n%v", err)
	}
	want, _ := config.Load("testdata/tiers.yaml")
	got.Source, want.Source = "", ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("docs example and testdata/tiers.yaml differ")
	}
}
