package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// MainWithCluster is a TestMain for packages whose tests use the shared
// Cluster: it starts the Cluster in the background (StartSharedCluster) so
// that its start-up overlaps the first tests, runs the tests, stops every
// server, and then fails the run if goroutines leaked (goleak; ignore lists
// goroutines a dependency keeps on purpose).
func MainWithCluster(m *testing.M, ignore ...goleak.Option) {
	StartSharedCluster()
	os.Exit(RunChecked(m, ignore...))
}

// RunChecked runs the tests, checks the keys they left in the shared Redis
// ([CheckKeys]), stops every server this package started, and then, if the
// tests passed, checks for leaked goroutines (goleak; ignore
// lists goroutines a dependency keeps on purpose). It returns the exit
// code: 1 for a leak, which it prints. It is for a TestMain with more to do
// around the tests than MainWithCluster does.
func RunChecked(m *testing.M, ignore ...goleak.Option) int {
	code := finish(m.Run())
	if code == 0 {
		if err := goleak.Find(ignore...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
