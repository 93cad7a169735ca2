package fiberlimit_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redistest.StartSharedCluster()
	code := m.Run()
	redistest.Shutdown()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
