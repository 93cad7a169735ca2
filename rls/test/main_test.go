package test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(quotaChildEnv) != "" {
		os.Exit(runQuotaChild()) // a quota client process (rlqschild_test.go)
	}
	redistest.StartSharedCluster()
	code := redistest.RunChecked(m)
	if rlsBin != "" {
		// the tollgate-rls binary, built once for every test that runs it
		_ = os.RemoveAll(filepath.Dir(rlsBin))
	}
	os.Exit(code)
}
