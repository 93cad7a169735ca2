package rls

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// wildcardYAML is the reference's test/config/wildcard.yaml (envoyproxy/
// ratelimit, non-trailing wildcards, March 2026), with a share_threshold
// rule on a middle wildcard.
const wildcardYAML = `domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noWild
    value: foo
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: trailWild
    value: foo*bar*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: overlap
    value: a*a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: literal
    value: x*y
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: literal
    value: x*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: midpath
    value: /api/*/v2
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 20}
`

// TestWildcardsAnywhereAsTheReference: a '*' anywhere in a value matches
// any run of bytes (the empty one too), the cases of the reference's own
// tests (test/config/config_test.go, "middle wildcard", "multi-wildcard").
func TestWildcardsAnywhereAsTheReference(t *testing.T) {
	cfg, err := ParseConfig("wildcard.yaml", []byte(wildcardYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, value string
		path       string // "" = no rule
	}{
		{"wild", "foo", "test-domain.wild_foo*"},
		{"wild", "foobar", "test-domain.wild_foo*"},
		{"wild", "fo", ""},
		{"noWild", "foo", "test-domain.noWild_foo"},
		{"noWild", "foo1", ""},
		{"midWild", "barab", "test-domain.midWild_bar*b"},
		{"midWild", "bar123b", "test-domain.midWild_bar*b"},
		{"midWild", "barb", "test-domain.midWild_bar*b"}, // '*' matches the empty run
		{"midWild", "bara", ""},                          // no suffix
		{"midWild", "xbarb", ""},                         // no prefix
		{"multiWild", "foo123bar456baz", "test-domain.multiWild_foo*bar*baz"},
		{"multiWild", "foobarbaz", "test-domain.multiWild_foo*bar*baz"},
		{"multiWild", "foo123baz", ""}, // no middle part
		{"multiWild", "bar456baz", ""},
		{"multiWild", "foobazbarbaz", "test-domain.multiWild_foo*bar*baz"},
		{"multiWild", "foobaz", ""}, // the parts may not overlap
		{"trailWild", "foo123bar456", "test-domain.trailWild_foo*bar*"},
		{"trailWild", "foobar", "test-domain.trailWild_foo*bar*"},
		{"trailWild", "foo123", ""},
		{"overlap", "a", ""}, // prefix and suffix share the one byte
		{"overlap", "aa", "test-domain.overlap_a*a"},
		{"literal", "x*y", "test-domain.literal_x*y"}, // the exact value first
		{"literal", "xAy", "test-domain.literal_x*y"}, // then wildcards in file order
		{"literal", "xA", "test-domain.literal_x*"},
		{"midpath", "/api/v1/v2", "test-domain.midpath_/api/*/v2"},
		{"midpath", "/api/v1/v3", ""},
	} {
		r, _ := cfg.match("test-domain", entries(tc.key, tc.value))
		switch {
		case tc.path == "" && r != nil:
			t.Errorf("%s=%s: matched %s, want no rule", tc.key, tc.value, r.path)
		case tc.path != "" && (r == nil || r.path != tc.path):
			t.Errorf("%s=%s: matched %v, want %s", tc.key, tc.value, r, tc.path)
		}
	}
	if r, _ := cfg.match("test-domain", entries("nestedWild", "val1", "wild", "goo-1")); r == nil || r.path != "test-domain.nestedWild_val1.wild_goo*" {
		t.Errorf("nested wildcard: matched %v", r)
	}

	// share_threshold on a middle wildcard: one bucket for every match;
	// without it, each value its own
	d1, d2 := entries("midpath", "/api/a/v2"), entries("midpath", "/api/b/v2")
	_, s1 := cfg.match("test-domain", d1)
	_, s2 := cfg.match("test-domain", d2)
	if a, b := bucketID("test-domain", d1, s1), bucketID("test-domain", d2, s2); a != b || !strings.Contains(a, "/api/*/v2") {
		t.Errorf("share_threshold on a middle wildcard: buckets %q and %q, want one, of the pattern", a, b)
	}
	m1, m2 := entries("midWild", "barab"), entries("midWild", "bar123b")
	_, s1 = cfg.match("test-domain", m1)
	_, s2 = cfg.match("test-domain", m2)
	if bucketID("test-domain", m1, s1) == bucketID("test-domain", m2, s2) {
		t.Error("a middle wildcard without share_threshold: two values share one bucket")
	}

	// share_threshold needs a '*' somewhere, no longer at the end only
	if _, err := ParseConfig("x.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")); err != nil {
		t.Errorf("share_threshold on a middle wildcard refused: %v", err)
	}
	_, err = ParseConfig("x.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: ab\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"))
	if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "containing '*'") {
		t.Errorf("share_threshold without a wildcard: %v", err)
	}
}

// TestWildcardMatchesBounded: a pattern with many '*' against a long
// value answers, and as the reference's wildcardMatch (a left-most scan,
// linear in the value per part).
func TestWildcardMatchesBounded(t *testing.T) {
	w := newWildcard("k_" + strings.Repeat("a*", 100) + "b")
	if w.matches("k_" + strings.Repeat("a", 100000)) {
		t.Error("matched a value without the final b")
	}
	if !w.matches("k_" + strings.Repeat("a", 100000) + "b") {
		t.Error("did not match")
	}
}

const metadataYAML = `domain: md
descriptors:
  - key: plan
    value: gold
    metadata:
      tier: gold
      weight: 3
      flags: [a, 1, true]
      nested: {x: 1, 2: two}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: service
    metadata: {level: top}
    descriptors:
      - key: user
        metadata: {level: user}
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: none
    metadata:
    rate_limit: {unit: hour, requests_per_unit: 5}
`

// TestDescriptorMetadataIsRead: a descriptor's metadata (the reference's
// user metadata, April 2026) loads as a struct, nested mappings' keys as
// strings, and is the matched rule's own (a level above gives it none).
func TestDescriptorMetadataIsRead(t *testing.T) {
	cfg, err := ParseConfig("md.yaml", []byte(metadataYAML))
	if err != nil {
		t.Fatal(err)
	}
	want, err := structpb.NewStruct(map[string]any{
		"tier": "gold", "weight": 3, "flags": []any{"a", 1, true},
		"nested": map[string]any{"x": 1, "2": "two"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := cfg.match("md", entries("plan", "gold"))
	if r == nil || !proto.Equal(r.metadata, want) {
		t.Errorf("plan=gold: metadata %v, want %v", metadataOf(r), want)
	}
	r, _ = cfg.match("md", entries("service", "s", "user", "u"))
	if want := mustStruct(t, map[string]any{"level": "user"}); r == nil || !proto.Equal(r.metadata, want) {
		t.Errorf("service.user: metadata %v, want %v", metadataOf(r), want)
	}
	if r, _ = cfg.match("md", entries("none", "x")); r == nil || r.metadata != nil {
		t.Errorf("an empty metadata: %v, want none", metadataOf(r))
	}

	for _, bad := range []struct{ yaml, why string }{
		{"domain: d\ndescriptors:\n  - key: k\n    metadata: text\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", "takes a mapping"},
		{"domain: d\ndescriptors:\n  - key: k\n    metadata: [a, b]\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", "takes a mapping"},
		{"domain: d\ndescriptors:\n  - key: k\n    metadata: {when: !!timestamp 2001-12-14}\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", "error parsing metadata"},
		// a level without a rule is read too
		{"domain: d\ndescriptors:\n  - key: k\n    metadata: {bytes: !!binary /w==}\n    descriptors:\n      - key: j\n        rate_limit: {unit: hour, requests_per_unit: 1}\n", "error parsing metadata"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, metadata: {a: b}}\n", `unknown key "metadata"`},
	} {
		_, err := ParseConfig("bad.yaml", []byte(bad.yaml))
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), bad.why) {
			t.Errorf("%q: got %v, want an error saying %q", bad.yaml, err, bad.why)
		}
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// metadataOf is r's metadata, nil for no rule.
func metadataOf(r *rule) *structpb.Struct {
	if r == nil {
		return nil
	}
	return r.metadata
}

// BenchmarkMatchWildcards: a match that tries every wildcard of a level
// (32 middle wildcards, none matching, then the key alone).
func BenchmarkMatchWildcards(b *testing.B) {
	var y strings.Builder
	y.WriteString("domain: d\ndescriptors:\n")
	for i := range 32 {
		fmt.Fprintf(&y, "  - key: path\n    value: /api/%d/*/v%d/*\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", i, i)
	}
	y.WriteString("  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	cfg, err := ParseConfig("b.yaml", []byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	d := entries("path", "/api/other/users/1234/v2/items")
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := cfg.match("d", d); r == nil || r.path != "d.path" {
			b.Fatal("no match")
		}
	}
}
