package main_test

import (
	"runtime"
	"strings"
	"testing"
)

// --version prints the build's version and Go version, and needs no Redis.
func TestVersion(t *testing.T) {
	r := tollgate(t, nil, "--version")
	r.check(t, 0, "tollgate ", "")
	if !strings.HasPrefix(r.stdout, "tollgate ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("--version printed %q, want tollgate <version> ... %s", r.stdout, runtime.Version())
	}
}
