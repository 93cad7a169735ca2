package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// copyTree copies the repository's versions.yaml, go.work and go.mod files
// into a temporary directory.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := copyModFiles(filepath.Join("..", ".."), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func parseMod(t *testing.T, p string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(p, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCutRewritesVersionsAndModFiles(t *testing.T) {
	root := copyTree(t)
	old, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	const next = "v0.99.1"
	if changed, err := setVersion(root, next); err != nil || !changed {
		t.Fatalf("setVersion: changed %v, %v", changed, err)
	}
	v, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != next || v.Previous != old.Version || !slices.Equal(v.Modules, old.Modules) {
		t.Fatalf("versions.yaml after setVersion: %+v", v)
	}
	changed, err := syncModFiles(root, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) == 0 {
		t.Fatal("sync changed nothing after a version change")
	}
	dirs, err := goModDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	testReplaces := 0
	for _, d := range dirs {
		f := parseMod(t, filepath.Join(root, d, "go.mod"))
		for _, r := range f.Require {
			if v.published(r.Mod.Path) && r.Mod.Version != next {
				t.Errorf("%s requires %s %s, want %s", d, r.Mod.Path, r.Mod.Version, next)
			}
		}
		if v.published(f.Module.Mod.Path) && len(f.Replace) > 0 {
			t.Errorf("published module %s keeps replace %s", d, f.Replace[0].Old.Path)
		}
		if strings.HasSuffix(d, "/test") {
			testReplaces += len(f.Replace)
		}
	}
	if testReplaces == 0 {
		t.Error("the test-only modules lost their replace lines")
	}
	b, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := modfile.ParseWork("go.work", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range w.Replace {
		if ours(r.Old.Path) {
			t.Errorf("go.work: replace %s %s => %s: a workspace needs none", r.Old.Path, r.Old.Version, r.New.Path)
		}
	}
	// a second run is a no-op
	again, err := syncModFiles(root, v)
	if err != nil || len(again) > 0 {
		t.Fatalf("second sync: changed %v, %v", again, err)
	}
	if changed, err := setVersion(root, next); err != nil || changed {
		t.Fatalf("second setVersion: changed %v, %v", changed, err)
	}
}

func TestSyncRefusesAPublishedModuleRequiringAnUnpublishedOne(t *testing.T) {
	root := copyTree(t)
	v, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	// drop core from the published list: every adapter requires it
	v.Modules = slices.DeleteFunc(slices.Clone(v.Modules), func(m string) bool { return m == "core" })
	_, err = syncModFiles(root, v)
	if err == nil || !strings.Contains(err.Error(), "does not list as published") {
		t.Fatalf("sync with core unlisted: %v", err)
	}
}

func TestSetVersionRefusesAnOlderVersion(t *testing.T) {
	root := copyTree(t)
	for _, bad := range []string{"v0.0.1", "v0.2", "0.3.0", "v2.0.0", "v0.3.0+meta"} {
		if err := checkVersion(bad); err == nil {
			if _, err := setVersion(root, bad); err == nil {
				t.Errorf("setVersion(%q) accepted", bad)
			}
		}
	}
}

func TestBreakingBump(t *testing.T) {
	for _, c := range []struct {
		base, next string
		want       bool
	}{
		{"v0.2.0", "v0.2.1", false},
		{"v0.2.0", "v0.3.0", true},
		{"v1.2.0", "v1.3.0", false},
		{"v1.2.0", "v2.0.0", true},
	} {
		if got := breakingBump(c.base, c.next); got != c.want {
			t.Errorf("breakingBump(%s, %s) = %v, want %v", c.base, c.next, got, c.want)
		}
	}
}
