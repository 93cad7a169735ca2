package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit"
)

// TestCallerGone: a request whose context ended before the check (the
// client disconnected, a server deadline passed) does not run the handler,
// is answered 503 without rate-limit headers, and never opens the circuit
// breaker for other tenants, even under fail-closed.
func TestCallerGone(t *testing.T) {
	lim := testkit.NewUnitLimiter(t, core.WithFailurePolicy(core.FailClosed), core.WithCircuitBreaker(3, time.Hour))
	t.Cleanup(func() { _ = lim.Close() })
	calls := 0
	h := httplimit.Middleware(testkit.NewUnitGate(t, lim))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls++ }))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for range 5 {
		for _, ctx := range []context.Context{cancelled, expired} {
			r := withTenant(httptest.NewRequest(http.MethodGet, "/v1/items", nil).WithContext(ctx), "attacker")
			w := serve(h, r)
			if w.Code != http.StatusServiceUnavailable || calls != 0 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("a request whose context ended: %d %q (handler ran %d times)", w.Code, w.Body, calls)
			}
		}
	}
	w := serve(h, withTenant(httptest.NewRequest(http.MethodGet, "/v1/items", nil), "t1"))
	if w.Code != http.StatusOK || calls != 1 {
		t.Fatalf("another tenant after the gone callers: %d %q: the breaker opened", w.Code, w.Body)
	}
}
