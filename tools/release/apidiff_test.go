package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A clone without tags still finds a release by the commit versions.yaml
// records for it, and only the modules that release published.
func TestReleaseFoundWithoutTags(t *testing.T) {
	root := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q")
	write("versions.yaml", "version: v0.1.0\nmodules:\n  - a\n")
	write("a/go.mod", "module "+modulePrefix+"/a\n")
	write("b/go.mod", "module "+modulePrefix+"/b\n") // exists, not published
	run("add", "-A")
	run("commit", "-q", "-m", "v0.1.0")
	rel := run("rev-parse", "HEAD")

	v := &Versions{Version: "v0.1.0", Modules: []string{"a", "b"}, Released: map[string]string{"v0.1.0": rel}}
	if ref := releaseRef(root, v, "a", "v0.1.0"); ref != rel {
		t.Fatalf("releaseRef(a) = %q, want the recorded commit %s", ref, rel)
	}
	if !hasModule(root, rel, "a") {
		t.Error("a was published at the recorded commit, hasModule says no")
	}
	if hasModule(root, rel, "b") {
		t.Error("b was not in that release's modules, hasModule says it was")
	}
	if ref := releaseRef(root, v, "a", "v0.2.0"); ref != "" {
		t.Errorf("releaseRef for an unrecorded, untagged version = %q, want none", ref)
	}
	missing := &Versions{Version: "v0.1.0", Modules: []string{"a"}, Released: map[string]string{"v0.1.0": strings.Repeat("0", 40)}}
	if ref := releaseRef(root, missing, "a", "v0.1.0"); ref != "" {
		t.Errorf("releaseRef with a commit this repository lacks = %q, want none", ref)
	}
	// a tag wins over the record
	run("tag", "a/v0.1.0")
	if ref := releaseRef(root, missing, "a", "v0.1.0"); ref != "a/v0.1.0" {
		t.Errorf("releaseRef with a tag = %q, want the tag", ref)
	}
	if err := (&Versions{Version: "v0.1.0", Modules: []string{"a"}, Released: map[string]string{"v0.1.0": "abc"}}).validate(); err == nil {
		t.Error("a short commit under released validated")
	}
}
