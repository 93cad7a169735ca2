package fiberlimit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"go.uber.org/goleak"
)

// fasthttp keeps a goroutine that refreshes its Date header cache.
func TestMain(m *testing.M) {
	redistest.MainWithCluster(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}
