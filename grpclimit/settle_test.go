package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"google.golang.org/grpc/metadata"
)

// TestSettle: a unary handler reports its actual cost through its context,
// a stream handler through the stream's context before it returns; the
// reservation (the route's cost, 100) is settled to it; without a report
// the estimate stands.
func TestSettle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		lim := newLimiter(t, c)
		t.Cleanup(func() { _ = lim.Close() })
		routes := gate.Routes{mProfile: {Class: "llm", Cost: 100}, mUpload: {Class: "llm", Cost: 100}}
		e := newEnv(t, testkit.NewUnitGate(t, lim, gate.WithCostReports(), gate.WithRoutes(routes)))
		cl := e.client(t)
		tokens := func(tenant string) float64 {
			d, err := lim.Peek(context.Background(), quota.Tenant{ID: tenant, Tier: "free"}, "llm")
			if err != nil {
				t.Fatal(err)
			}
			return d.Tokens
		}
		cost := func(ctx context.Context, n string) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "x-actual-cost", n)
		}
		if _, err := cl.GetProfile(cost(as("unary", ""), "350"), &testpb.GetProfileRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := tokens("unary"); got < 650 || got > 650.1 {
			t.Fatalf("unary settled to 350: %v tokens, want 650", got)
		}
		if _, err := cl.GetProfile(as("quiet", ""), &testpb.GetProfileRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := tokens("quiet"); got < 900 || got > 900.1 {
			t.Fatalf("no report: %v tokens, want 900", got)
		}
		st, err := cl.Upload(cost(as("stream", ""), "20"))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("stream end: %v", err)
		}
		if got := tokens("stream"); got < 980 || got > 980.1 {
			t.Fatalf("stream settled to 20: %v tokens, want 980", got)
		}
	})
}
