package linearize_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(replicaEnv); raw != "" {
		// a replica (see replica_test.go), not the tests
		if err := runReplica(raw); err != nil {
			fmt.Fprintln(os.Stderr, "replica:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(redistest.RunChecked(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")))
}
