package core_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redistest.StartSharedCluster()
	// Example functions read REDIS_URL: point it at the harness's server
	if u, err := redistest.SharedURL(); err == nil {
		os.Setenv("REDIS_URL", u)
	}
	code := m.Run()
	redistest.Shutdown()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
