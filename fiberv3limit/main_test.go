// The tests of fiberv3limit that need a real Redis and the conformance
// suite, in a module of their own so that the adapter's module requires
// only core, httplimit and Fiber.
package fiberv3limit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
)

func TestMain(m *testing.M) { conformance.Main(m) }
