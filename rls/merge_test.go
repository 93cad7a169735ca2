package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core"
)

// Two files of one domain, merged as the reference's
// MERGE_DOMAIN_CONFIG=true merges them: the second file's descriptors join
// the domain's, and a descriptor key at the top of both is an error.
func TestMergeDomainsAsTheReference(t *testing.T) {
	a := ConfigFile{"a.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: w\n    value: x*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")}
	b := ConfigFile{"b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: b\n    rate_limit: {unit: hour, requests_per_unit: 3}\n  - key: w\n    value: '*'\n    rate_limit: {unit: day, requests_per_unit: 4}\n")}
	other := ConfigFile{"c.yaml", []byte("domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")}

	if _, err := ParseConfigs([]ConfigFile{a, b}); err == nil || !strings.Contains(err.Error(), `b.yaml:1: duplicate domain "d"`) {
		t.Errorf("without MergeDomains: %v, want duplicate domain", err)
	}
	if _, err := ParseConfigs([]ConfigFile{a, b}, MergeDomains(false)); err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("MergeDomains(false): %v, want duplicate domain", err)
	}
	cfg, err := ParseConfigs([]ConfigFile{a, b, other}, MergeDomains(true))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "d,e" {
		t.Errorf("domains %q", got)
	}
	for _, tc := range []struct {
		domain string
		kv     []string
		want   uint32 // requests_per_unit; 0: no rule
	}{
		{"d", []string{"k", "a"}, 1},
		{"d", []string{"k", "b"}, 3},
		{"d", []string{"k", "c"}, 0},
		{"d", []string{"w", "xy"}, 2}, // the first file's wildcard first, as loaded
		{"d", []string{"w", "yy"}, 4},
		{"e", []string{"k", "z"}, 5},
	} {
		r, _ := cfg.match(tc.domain, entries(tc.kv...))
		var got uint32
		if r != nil {
			got = r.limit.GetRequestsPerUnit()
		}
		if got != tc.want {
			t.Errorf("%s %v: requests_per_unit %d, want %d", tc.domain, tc.kv, got, tc.want)
		}
	}

	// the conflicts the reference refuses: the same key (and value) at the
	// top of two files, whatever is below it
	for _, tc := range []struct{ second, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: second, requests_per_unit: 9}\n", "b.yaml:3: duplicate descriptor composite key 'd.k_a'"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: a\n    descriptors:\n      - key: n\n        rate_limit: {unit: second, requests_per_unit: 9}\n", "duplicate descriptor composite key 'd.k_a'"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: b\n  - key: k\n    value: b\n", "duplicate descriptor composite key 'd.k_b'"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: q\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n", "invalid rate limit unit"},
	} {
		_, err := ParseConfigs([]ConfigFile{a, {"b.yaml", []byte(tc.second)}}, MergeDomains(true))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("%q: got %v, want an error containing %q", tc.second, err, tc.want)
		}
	}

	// a directory, as RUNTIME_ROOT's files: the same merge, and the same
	// refusal without the option
	dir := t.TempDir()
	for _, f := range []ConfigFile{a, b} {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("a directory without MergeDomains: %v", err)
	}
	cfg, err = LoadConfig(dir, MergeDomains(true))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := cfg.match("d", entries("k", "b")); r == nil || r.limit.GetRequestsPerUnit() != 3 {
		t.Errorf("a directory merged: the second file's rule is %v", r)
	}
	if _, err := LoadConfig(dir, nil); err == nil {
		t.Error("a nil LoadOption changed the default")
	}
}
