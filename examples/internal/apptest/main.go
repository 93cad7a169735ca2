package apptest

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"go.uber.org/goleak"
)

// Main is the examples' TestMain: it runs the tests, stops the Redis
// servers the harness started, and fails the run if a goroutine leaked.
func Main(m *testing.M) {
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
