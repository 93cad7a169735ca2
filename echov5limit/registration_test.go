package echov5limit_test

import (
	"fmt"
	"testing"

	"github.com/tollgate-go/tollgate/echov5limit"
)

// A nil gate fails where the limiter is registered, as http.Handle(pattern,
// nil) does, instead of answering every request 500.
func TestMiddlewarePanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: echov5limit.Middleware: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	echov5limit.Middleware(nil)
	t.Errorf("echov5limit.Middleware(nil) returned: a nil gate must fail where it is registered")
}
