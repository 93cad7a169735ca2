package core

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
)

// settleScript settles reservations. Only a settle sends it, straight
// through the limiter's client: the check path's scripts, leases, deny cache
// and batcher are untouched.
var settleScript = transport.NewScript(lua.Settle())

// settleable reports whether d is a reservation that Limiter.Settle can settle:
// admitted and charged by the store (ReasonOK, not by the local fallback)
// with a cost above zero. A request let through unchecked (failed open,
// shadow mode) or charged by the local fallback has nothing in the store to
// settle.
func (d Decision) settleable() bool {
	return d.Reason == ReasonOK && !d.Fallback && d.Cost > 0 && len(d.Buckets) > 0
}

// Settle settles a reservation: tenant t's request was admitted by d with
// its cost, d.Cost, as an estimate, and actual is what it really cost.
// Every bucket of d (the request's classes and ceilings) is charged actual
// - d.Cost more, or refunded d.Cost - actual, in one script call, atomic
// across the buckets. A refund never lifts a balance above its capacity; a
// charge may take it below zero, a debt: the tenant's later requests to
// those buckets are denied (ReasonOverLimit, RetryAfter counting the debt)
// until the refill repays it. A debt stops at one capacity: what lies
// beyond is forgiven and returned (the largest over d's buckets).
//
// Settle once per admission: a second call charges the difference again.
// A reservation never settled stays charged at the estimate. When d has
// nothing in the store to settle (denied, failed open, shadow mode, the
// local fallback's) or actual equals the estimate, Settle makes no call and
// returns 0, nil. actual must be 0 to quota.MaxCost (else an error wrapping
// ErrInvalidRequest, nothing settled), and so is a decision of a request
// whose AlsoCosts differ from its Cost. A store failure returns an error
// wrapping ErrStore: the estimate stands. The call is bounded by the check
// timeout and not by ctx's cancellation (the caller may be gone by the time
// its cost is known), only by its values.
func (l *Limiter) Settle(ctx context.Context, t quota.Tenant, d Decision, actual int64) (forgiven int64, err error) {
	if actual < 0 || actual > quota.MaxCost {
		return 0, fmt.Errorf("%w: actual cost must be 0 to %d, got %d", ErrInvalidRequest, int64(quota.MaxCost), actual)
	}
	if !d.settleable() || actual == d.Cost {
		return 0, nil
	}
	if d.mixedCosts {
		return 0, fmt.Errorf("%w: a decision of a request with AlsoCosts charged its buckets different costs and cannot be settled", ErrInvalidRequest)
	}
	keys := make([]string, len(d.Buckets))
	args := make([]any, 0, 2+2*len(d.Buckets))
	args = append(args, l.nowArg(), strconv.FormatInt(actual-d.Cost, 10))
	for i, b := range d.Buckets {
		if keys[i], err = l.keys.Bucket(t.ID, b.Name); err != nil {
			return 0, err
		}
		q := l.quotaArgs(b.Quota)
		args = append(args, q[0], q[1])
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.timeout)
	defer cancel()
	v, err := settleScript.Run(cctx, l.scripts, settleScript.Line(keys, args...))
	if err != nil {
		return 0, l.settleFailed(t, transport.StoreError(cctx, l.cfg.timeout, err))
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2*len(keys) {
		return 0, l.settleFailed(t, fmt.Errorf("%w: settle script reply %T of length %d", errProtocol, v, len(a)))
	}
	for i := range keys {
		f, ok := a[i].(int64)
		if !ok || f < 0 {
			return 0, l.settleFailed(t, fmt.Errorf("%w: settle script reply element %v", errProtocol, a[i]))
		}
		forgiven = max(forgiven, f)
	}
	if l.deny != nil && actual < d.Cost {
		// a refund: a remembered denial may no longer be proved
		l.deny.Delete(keys[0])
	}
	return forgiven, nil
}

// settleFailed logs (at most once a second, as degraded checks) and counts
// a failed settle of tenant t's reservation, and returns err.
func (l *Limiter) settleFailed(t quota.Tenant, err error) error {
	l.metrics.settleFailed(err)
	l.logDegraded("tollgate: a reservation could not be settled; its estimate stands", Request{Tenant: t}, err)
	return err
}
