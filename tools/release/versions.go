package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/semver"
)

// modulePrefix is the import path of the repository root; every module's
// path is modulePrefix + "/" + its directory.
const modulePrefix = "github.com/tollgate-go/tollgate"

// fullCommit is a git commit hash spelled out.
var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// versionsFile is versions.yaml at the repository root.
const versionsFile = "versions.yaml"

// Versions is the release train described by versions.yaml.
type Versions struct {
	Version           string   `yaml:"version"`
	Previous          string   `yaml:"previous"`
	Modules           []string `yaml:"modules"`
	AllowIncompatible []string `yaml:"allow-incompatible"`
	// Released maps each release cut to the commit it was cut from: the
	// API check's baseline in a clone that carries no tags.
	Released map[string]string `yaml:"released"`
}

func readVersions(root string) (*Versions, error) {
	b, err := os.ReadFile(filepath.Join(root, versionsFile))
	if err != nil {
		return nil, err
	}
	var v Versions
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", versionsFile, err)
	}
	if err := v.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", versionsFile, err)
	}
	return &v, nil
}

func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("%q is not a canonical semantic version like v0.2.0", v)
	}
	if semver.Major(v) != "v0" && semver.Major(v) != "v1" {
		return fmt.Errorf("%s: a major version above v1 needs /vN module paths, which this tool does not do", v)
	}
	return nil
}

func (v *Versions) validate() error {
	if err := checkVersion(v.Version); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if v.Previous != "" {
		if err := checkVersion(v.Previous); err != nil {
			return fmt.Errorf("previous: %w", err)
		}
		if semver.Compare(v.Previous, v.Version) >= 0 {
			return fmt.Errorf("previous %s is not older than version %s", v.Previous, v.Version)
		}
	}
	for rel, c := range v.Released {
		if err := checkVersion(rel); err != nil {
			return fmt.Errorf("released: %w", err)
		}
		if !fullCommit.MatchString(c) {
			return fmt.Errorf("released: %s: %q is not a full commit hash (40 hex digits)", rel, c)
		}
	}
	if len(v.Modules) == 0 {
		return fmt.Errorf("modules: none listed")
	}
	seen := map[string]bool{}
	for _, m := range v.Modules {
		if m == "" || filepath.IsAbs(m) || filepath.Clean(m) != m || m == "." || m[0] == '.' {
			return fmt.Errorf("modules: %q is not a directory under the root", m)
		}
		if seen[m] {
			return fmt.Errorf("modules: %q listed twice", m)
		}
		seen[m] = true
	}
	return nil
}

// modulePath is the module path of the published module in directory dir.
func modulePath(dir string) string { return modulePrefix + "/" + filepath.ToSlash(dir) }

// published reports whether path is the module path of a listed module.
func (v *Versions) published(path string) bool {
	return slices.ContainsFunc(v.Modules, func(m string) bool { return modulePath(m) == path })
}

// tags are the tags of a release: <dir>/<version> for each module.
func (v *Versions) tags(version string) []string {
	var t []string
	for _, m := range v.Modules {
		t = append(t, filepath.ToSlash(m)+"/"+version)
	}
	return t
}

var (
	versionLine  = regexp.MustCompile(`(?m)^version:.*$`)
	previousLine = regexp.MustCompile(`(?m)^previous:.*$`)
	allowBlock   = regexp.MustCompile(`(?m)^allow-incompatible:(.*\n(?:[ \t]+.*\n|[ \t]*\n)*)`)
)

// setVersion rewrites versions.yaml for a new release, keeping its comments:
// version becomes next, previous the old version, and the allow-list of
// incompatible changes (accepted against the old baseline) is emptied.
func setVersion(root, next string) (changed bool, err error) {
	v, err := readVersions(root)
	if err != nil {
		return false, err
	}
	if v.Version == next {
		return false, nil
	}
	if semver.Compare(next, v.Version) < 0 {
		return false, fmt.Errorf("%s is older than the current version %s", next, v.Version)
	}
	if _, err := syncFile(filepath.Join(root, versionsFile), func(b []byte) ([]byte, error) {
		s := string(b)
		s = versionLine.ReplaceAllString(s, "version: "+next)
		s = previousLine.ReplaceAllString(s, "previous: "+v.Version)
		s = allowBlock.ReplaceAllString(s, "allow-incompatible: []\n")
		return []byte(s), nil
	}); err != nil {
		return false, err
	}
	// read back: the rewrite must parse and say what we meant
	w, err := readVersions(root)
	if err != nil {
		return false, err
	}
	if w.Version != next || w.Previous != v.Version || len(w.AllowIncompatible) != 0 {
		return false, fmt.Errorf("%s: rewrite did not take (version %q previous %q)", versionsFile, w.Version, w.Previous)
	}
	return true, nil
}
