package apptest

import (
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

// Main is the examples' TestMain: it runs the tests, stops the Redis
// servers the harness started, and fails the run if a goroutine leaked
// (opts name goroutines a framework keeps on purpose).
func Main(m *testing.M, opts ...goleak.Option) { os.Exit(redistest.RunChecked(m, opts...)) }

// FastHTTPGoroutines are the goroutines fasthttp (under Fiber) keeps on
// purpose, for Main: one refreshes its Date header cache, and its worker
// pool's cleaner sleeps up to 10 s before it sees the pool stopped.
var FastHTTPGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
}
