package core_test

import (
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

// go-redis re-dials a dead server in the background and notices a closed
// pool only after its back-off sleep: not a leak of ours.
func TestMain(m *testing.M) {
	if os.Getenv(fleetRole) == "waiter" {
		os.Exit(runWaiter()) // a worker process of the wait fleet test
	}
	if os.Getenv(fleetRole) == "lease" {
		os.Exit(runLeaseReplica()) // a replica process of the lease fleet test
	}
	if os.Getenv(fleetRole) != "" {
		os.Exit(runReplica()) // a replica process of the fleet tests
	}
	redistest.MainWithCluster(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
