package fiberv3limit_test

import (
	"fmt"
	"testing"

	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// A nil gate fails where the limiter is registered, as http.Handle(pattern,
// nil) does, instead of answering every request 500.
func TestNewPanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: fiberv3limit.New: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	fiberv3limit.New(nil)
	t.Errorf("fiberv3limit.New(nil) returned: a nil gate must fail where it is registered")
}
