package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestNoDeadlineNeverCanceled: a caller whose context has no deadline and
// is never cancelled is never told it left (ReasonCanceled), whatever the
// limiter's own timeouts do: with leases (waiters of an acquisition that
// times out), the deny cache and batching, against a hung Redis. The
// limiter's timeouts are never in the caller's context, so nothing can
// read them as the caller's. (A lease waiter used to wait under a context
// of the limiter's own timeout and, when the socket timed out a moment
// before that context's timer, was answered "the caller's context ended
// first".) Run it many times under load: go test -race -count 200 -run
// TestNoDeadlineNeverCanceled.
func TestNoDeadlineNeverCanceled(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		for _, leases := range []bool{false, true} {
			srv := redistest.NewServer(t)
			opts := append(v.options(), core.WithTimeout(20*time.Millisecond), core.WithCircuitBreaker(0, 0))
			if leases {
				opts = append(opts, core.WithLeases("default", 10, time.Second))
			}
			l := newLimiter(t, srv.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(100)}), opts...)
			check(t, l, "warm", 0)
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					tenant := quota.Tenant{ID: "hot"}
					if i%2 == 1 {
						tenant.ID = "t" + string(rune('a'+i))
					}
					d, err := l.Allow(context.Background(), tenant, "default", 1)
					if d.Reason == core.ReasonCanceled || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrStore) && !errors.Is(err, core.ErrOverloaded) {
						t.Errorf("leases %v: a caller without a deadline got %v: %v", leases, d.Reason, err)
					}
				})
			}
			wg.Wait()
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
