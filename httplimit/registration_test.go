package httplimit_test

import (
	"fmt"
	"testing"

	"github.com/tollgate-go/tollgate/httplimit"
)

// A nil gate fails where the limiter is registered, as http.Handle(pattern,
// nil) does, instead of answering every request 500.
func TestMiddlewarePanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: httplimit.Middleware: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	httplimit.Middleware(nil)
	t.Errorf("httplimit.Middleware(nil) returned: a nil gate must fail where it is registered")
}
