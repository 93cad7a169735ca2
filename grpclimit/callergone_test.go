package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallerGone: calls whose context ends before the check (a 50µs
// grpc-timeout, a cancelled call) are answered with their context's status,
// never run the handler, and never open the circuit breaker for other
// tenants, even under fail-closed.
func TestCallerGone(t *testing.T) {
	lim := newLimiter(t, redistest.Client(t), core.WithFailurePolicy(core.FailClosed), core.WithCircuitBreaker(3, time.Hour))
	t.Cleanup(func() { _ = lim.Close() })
	e := newEnv(t, testkit.NewUnitGate(t, lim))
	c := e.client(t)
	for range 10 {
		ctx, cancel := context.WithTimeout(as("attacker", ""), 50*time.Microsecond)
		r := getProfile(ctx, c)
		cancel()
		if code := r.st.Code(); code != codes.DeadlineExceeded && code != codes.Canceled {
			t.Fatalf("a 50µs deadline: %v", r.err)
		}
	}
	unary := grpclimit.UnaryServerInterceptor(testkit.NewUnitGate(t, lim))
	tenant := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "attacker"})
	cancelled, cancel := context.WithCancel(tenant)
	cancel()
	expired, cancel2 := context.WithDeadline(tenant, time.Now().Add(-time.Second))
	defer cancel2()
	info := &grpc.UnaryServerInfo{FullMethod: "/tollgate.test.v1.TestService/GetProfile"}
	for _, tc := range []struct {
		ctx  context.Context
		want codes.Code
	}{{cancelled, codes.Canceled}, {expired, codes.DeadlineExceeded}, {cancelled, codes.Canceled}, {expired, codes.DeadlineExceeded}} {
		ran := false
		_, err := unary(tc.ctx, nil, info, func(context.Context, any) (any, error) { ran = true; return nil, nil })
		if status.Code(err) != tc.want || ran {
			t.Fatalf("a call whose context ended: %v (handler ran: %v), want %v", err, ran, tc.want)
		}
	}
	if r := getProfile(as("t1", ""), c); r.err != nil {
		t.Fatalf("another tenant after the gone callers: %v: the breaker opened", r.err)
	}
	if e.svc.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", e.svc.calls.Load())
	}
}
