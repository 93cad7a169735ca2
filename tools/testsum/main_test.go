package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real go test -json run of a small module with a passing, a failing, a
// skipped test and a package that panics: the summary prints every
// failure's output, names the skip and its reason, and counts them.
func TestSummariseRealRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/sum\n\ngo 1.22\n")
	write("a/a_test.go", `package a

import "testing"

func TestPass(t *testing.T) { t.Log("quiet when passing") }
func TestFail(t *testing.T) { t.Error("this failure is shown") }
func TestSkip(t *testing.T) { t.Skip("prometheus not installed") }
`)
	write("b/b_test.go", `package b

import "testing"

func TestPanic(t *testing.T) { panic("this panic is shown") }
`)
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	raw, err := cmd.Output()
	if err == nil {
		t.Fatal("go test passed a module with a failing test")
	}
	var out strings.Builder
	s, err := summarise(strings.NewReader(string(raw)), &out)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"this failure is shown",
		"this panic is shown",
		"--- SKIP: TestSkip (example.com/sum/a): ",
		"prometheus not installed",
		"FAIL\texample.com/sum/a",
		"FAIL\texample.com/sum/b",
		"tests: 1 passed, 2 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet when passing") {
		t.Errorf("a passing test's log is printed:\n%s", got)
	}
	if !s.bad {
		t.Error("a failed run summarised as good")
	}
}
