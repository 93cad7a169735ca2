package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// toBeCut is the Unreleased section's statement of the version it will be.
var toBeCut = regexp.MustCompile(`To be cut as (v[0-9]+\.[0-9]+\.[0-9]+)`)

// TestChangelogFollowsVersions: the CHANGELOG and versions.yaml tell one
// story. The version the tree is (versions.yaml `version`, what make proxy
// serves) is either released, with a section of its own, or the one the
// Unreleased section says it will be cut as.
func TestChangelogFollowsVersions(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	v, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	unreleased, _, _ := strings.Cut(log[strings.Index(log, "## [Unreleased]")+1:], "\n## [")
	if m := toBeCut.FindStringSubmatch(unreleased); m != nil && m[1] != v.Version {
		t.Errorf("CHANGELOG.md's Unreleased section is to be cut as %s, but versions.yaml's version (the tree's, what make proxy serves) is %s", m[1], v.Version)
	}
	if _, ok := v.Released[v.Version]; ok {
		if !strings.Contains(log, "\n## ["+v.Version+"]") {
			t.Errorf("versions.yaml says %s is released, but CHANGELOG.md has no section for it", v.Version)
		}
	} else if toBeCut.FindStringSubmatch(unreleased) == nil {
		t.Errorf("versions.yaml's version %s is not released, and CHANGELOG.md's Unreleased section does not say it will be cut as it", v.Version)
	}
}
