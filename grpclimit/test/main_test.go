package grpclimit_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redistest.StartSharedCluster() // overlap the Cluster's start-up with the first tests
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
