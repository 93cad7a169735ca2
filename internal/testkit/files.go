package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// ReplaceFile replaces the file at path with content the way the docs tell
// operators to, by writing a new file and renaming it over path, so that a
// watcher of path or of its folder never reads half a file. The new file is
// written in a folder of t's own (t.TempDir), never beside path, so path
// must be on the same file system as t.TempDir. A failure fails t.
func ReplaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
