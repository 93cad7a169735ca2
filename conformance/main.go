package conformance

import (
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

// Main is the TestMain of a test package that runs the suite:
//
//	func TestMain(m *testing.M) { conformance.Main(m) }
//
// It starts the suite's local Redis Cluster in the background, so that its
// start-up overlaps the first tests, runs the tests, fails the run if they
// left a key without a TTL in the shared Redis, stops every Redis server
// started for them, and then, if they passed, fails the run if goroutines
// leaked (goleak; ignore lists goroutines a dependency keeps on purpose,
// such as a framework's clock refresher). It does not return.
//
// The shared Redis is REDIS_URL, else a redis-server from PATH; the
// Cluster needs redis-server and redis-cli. Without them the tests fail
// under CI=true and skip otherwise.
func Main(m *testing.M, ignore ...goleak.Option) { redistest.MainWithCluster(m, ignore...) }
