package grpclimit_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
)

// TestOverloadedIsUnavailableWithRetry: a check the limiter sheds (one
// tenant's flood past its share of the waiting checks, while the store is
// held) is answered Unavailable with a RetryInfo and the pushback trailer,
// the handler never runs, and it is never let through: not under
// fail-open either.
func TestOverloadedIsUnavailableWithRetry(t *testing.T) {
	srv := redistest.NewServer(t)
	lim := newLimiter(t, srv.Client(t), core.WithFailurePolicy(core.FailOpen), core.WithBatching(true), core.WithCircuitBreaker(0, 0))
	t.Cleanup(func() { _ = lim.Close() })
	e := newEnv(t, testkit.NewUnitGate(t, lim))
	c := e.client(t)
	if r := getProfile(as("warm", ""), c); r.err != nil {
		t.Fatal(r.err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = srv.Resume()
		}
	})
	const calls, share = 800, 512 // 2 on the wire, 512 queued (the tenant's share), the rest shed
	results := make([]result, calls)
	var wg sync.WaitGroup
	var returned atomic.Int64
	for i := range calls {
		wg.Go(func() { results[i] = getProfile(as("flood", ""), c); returned.Add(1) })
	}
	// the shed calls return at once, the queued ones wait for the store:
	// resume once the calls beyond the share have returned (however slowly
	// a loaded machine delivers them), or after a bound
	deadline := time.Now().Add(30 * time.Second)
	for returned.Load() < calls-share-2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	wg.Wait()
	shed := 0
	for _, r := range results {
		if r.st.Code() != codes.Unavailable {
			continue
		}
		shed++
		var hint *errdetails.RetryInfo
		for _, d := range r.st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				hint = ri
			}
		}
		if hint == nil || hint.GetRetryDelay().AsDuration() != time.Second {
			t.Fatalf("a shed call's details: %v", r.st.Details())
		}
		if got := r.trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "1000" {
			t.Fatalf("a shed call's pushback trailer: %v", got)
		}
	}
	if shed < calls-share-2-10 {
		t.Fatalf("%d of %d calls shed, want about %d", shed, calls, calls-share-2)
	}
	if ran := int(e.svc.calls.Load()) - 1; ran > calls-shed {
		t.Fatalf("the handler ran %d times for %d calls not shed", ran, calls-shed)
	}
}
