package gate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// costReport is what a Verdict's context carries for its handler to report
// the request's actual cost (ReportCost); Verdict.Done settles it.
type costReport struct {
	lim    *core.Limiter
	actual atomic.Int64 // the reported cost + 1; 0: none
	once   sync.Once
}

type costReportKey struct{}

// CostContext returns ctx carrying v's reservation, for the handler to
// report the request's actual cost with ReportCost, and true; v.Done then
// settles it (Limiter.Settle). An adapter passes that context to the
// handler. A Verdict with nothing to settle (not admitted by the store with
// a cost) returns ctx as it is and false, so that the adapter need not
// replace the request's context.
func (v Verdict) CostContext(ctx context.Context) (context.Context, bool) {
	if v.report == nil {
		return ctx, false
	}
	return context.WithValue(ctx, costReportKey{}, v.report), true
}

// ReportCost reports the actual cost of the request whose context ctx is
// (or derives from): when the handler returns, the adapter settles the
// reservation its route's cost made (the estimate) to n. The last report
// wins; without one the estimate stands. It returns an error wrapping
// core.ErrInvalidRequest when n is outside 0 to quota.MaxCost, or when ctx carries no
// reservation (no middleware, an exempt route, or a request admitted
// without charging the store: failed open, shadow mode, local fallback),
// and then reports nothing.
func ReportCost(ctx context.Context, n int64) error {
	if n < 0 || n > quota.MaxCost {
		return fmt.Errorf("%w: cost must be 0 to %d, got %d", core.ErrInvalidRequest, int64(quota.MaxCost), n)
	}
	r, _ := ctx.Value(costReportKey{}).(*costReport)
	if r == nil {
		return fmt.Errorf("%w: no reservation in the context to report a cost to", core.ErrInvalidRequest)
	}
	r.actual.Store(n + 1)
	return nil
}

// settle settles v's reservation with the reported cost, once. What the
// settle did not charge (forgiven at a cap, refused above a ratio) and a
// failure are counted and logged by Limiter.Settle, so nothing is dropped
// silently here.
func (v Verdict) settle() {
	r := v.report
	if r == nil {
		return
	}
	r.once.Do(func() {
		if n := r.actual.Load(); n > 0 {
			_, _ = r.lim.Settle(context.Background(), v.Tenant, v.Decision, n-1)
		}
	})
}
