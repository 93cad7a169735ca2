package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestConcurrencySlot: a stream holds its tenant's one slot for its whole
// life, renewed past the lease, and frees it when it ends; a unary call
// frees its slot before its answer, so calls one after another all pass.
func TestConcurrencySlot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		const lease = 1500 * time.Millisecond
		routes := gate.Routes{mUpload: {Class: "reports", Cost: 1}, mProfile: {Class: "reports", Cost: 1}}
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithTimeout(lease/3), core.WithConcurrencySlots(lease, 0)), gate.WithRoutes(routes)))
		cl := e.client(t)
		for i := range 3 {
			if _, err := cl.GetProfile(as("t1", ""), &testpb.GetProfileRequest{}); err != nil {
				t.Fatalf("unary call %d, one after another: %v", i, err)
			}
		}
		ctx, cancel := context.WithCancel(as("t1", ""))
		defer cancel()
		st, err := cl.Upload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&testpb.UploadChunk{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		time.Sleep(2 * lease) // held past its lease: renewed
		_, err = cl.GetProfile(as("t1", ""), &testpb.GetProfileRequest{})
		if s := status.Convert(err); s.Code() != codes.ResourceExhausted || decode(t, s).info[0].GetMetadata()["reason"] != "concurrency_limit" {
			t.Fatalf("a call while the stream runs: %v; want ResourceExhausted, reason concurrency_limit", err)
		}
		if _, err := cl.GetProfile(as("t2", ""), &testpb.GetProfileRequest{}); err != nil {
			t.Fatalf("another tenant: %v", err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("stream end: %v", err)
		}
		// the stream's status came after its slot was freed
		if _, err := cl.GetProfile(as("t1", ""), &testpb.GetProfileRequest{}); err != nil {
			t.Fatalf("a call after the stream ended: %v", err)
		}
	})
}
