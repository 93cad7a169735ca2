package rls

import (
	"context"
	"strconv"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// replacesConfig is a domain whose rule a (unlimited) replaces b (0 per
// second: over limit unless replaced) and n-1 other names.
func replacesConfig(t testing.TB, n int) *Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      name: a\n      replaces:\n        - name: b\n")
	for i := 1; i < n; i++ {
		b.WriteString("        - name: other" + strconv.Itoa(i) + "\n")
	}
	b.WriteString("  - key: b\n    rate_limit: {unit: second, requests_per_unit: 0, name: b}\n")
	cfg, err := ParseConfig("replaces.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rulesServer is a Server over cfg whose limiter's store is never dialled:
// the requests asked of it are answered without the store.
func rulesServer(t testing.TB, cfg *Config) *Server {
	t.Helper()
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	lim, err := core.New(c, res, core.WithBatching(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	rules, err := NewRules(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(lim, WithRules(rules))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var replacesRequest = &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("a", "x"), entries("b", "y")}}

func askReplaces(t testing.TB, s *Server) {
	res, err := s.ShouldRateLimit(context.Background(), replacesRequest)
	if err != nil {
		t.Fatal(err)
	}
	if res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("b is replaced by a: want OK, got %v", res)
	}
}

// A rule's replaces list is read once, at load: a request matching a rule
// that replaces 200,000 names costs what one replacing one name costs (it
// cost a 200,000-entry map per request, half a second).
func TestReplacesCostNothingPerRequest(t *testing.T) {
	one, many := rulesServer(t, replacesConfig(t, 1)), rulesServer(t, replacesConfig(t, 200_000))
	askReplaces(t, one)
	askReplaces(t, many)
	a := testing.AllocsPerRun(5, func() { askReplaces(t, one) })
	b := testing.AllocsPerRun(5, func() { askReplaces(t, many) })
	if b > a {
		t.Errorf("a request allocates %v times with a rule replacing 200,000 names, %v with one replacing one", b, a)
	}
}

func BenchmarkReplaces(b *testing.B) {
	for _, n := range []int{1, 200_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := rulesServer(b, replacesConfig(b, n))
			b.ReportAllocs()
			for b.Loop() {
				askReplaces(b, s)
			}
		})
	}
}

// nested is a domain of depth levels of descriptors, the deepest with a
// rate limit.
func nested(depth int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range depth {
		ind := strings.Repeat("    ", i)
		b.WriteString(ind + "  - key: k" + strconv.Itoa(i) + "\n")
		if i == depth-1 {
			b.WriteString(ind + "    rate_limit: {unit: second, requests_per_unit: 1}\n")
		} else {
			b.WriteString(ind + "    descriptors:\n")
		}
	}
	return b.String()
}

// The docs' bound: descriptors nest at most 32 levels deep; 32 load, 33 do
// not.
func TestDescriptorDepthBound(t *testing.T) {
	if _, err := ParseConfig("deep.yaml", []byte(nested(maxDepth))); err != nil {
		t.Errorf("%d levels: %v", maxDepth, err)
	}
	if _, err := ParseConfig("deep.yaml", []byte(nested(maxDepth+1))); err == nil || !strings.Contains(err.Error(), "nested deeper than 32") {
		t.Errorf("%d levels: %v, want refused", maxDepth+1, err)
	}
}
