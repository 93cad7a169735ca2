package ginlimit_test

import (
	"fmt"
	"testing"

	"github.com/tollgate-go/tollgate/ginlimit"
)

// A nil gate fails where the limiter is registered, as http.Handle(pattern,
// nil) does, instead of answering every request 500.
func TestMiddlewarePanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: ginlimit.Middleware: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	ginlimit.Middleware(nil)
	t.Errorf("ginlimit.Middleware(nil) returned: a nil gate must fail where it is registered")
}
