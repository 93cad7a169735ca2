package fiberlimit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
	"go.uber.org/goleak"
)

// fasthttp keeps a goroutine that refreshes its Date header cache.
func TestMain(m *testing.M) {
	conformance.Main(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}
