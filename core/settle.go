package core

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
)

// settleScript settles reservations. Only a settle sends it, straight
// through the limiter's client: the check path's scripts, leases, deny cache
// and batcher are untouched.
var settleScript = transport.NewScript(lua.Settle())

// Settleable reports whether d is a reservation that Limiter.Settle can
// settle: admitted and charged by the store (ReasonOK, not by the local
// fallback) with a cost above zero. A request let through unchecked (failed
// open, shadow mode) or charged by the local fallback has nothing in the
// store to settle, and Settle makes no call for it.
func (d Decision) Settleable() bool {
	return d.Reason == ReasonOK && !d.Fallback && d.Cost > 0 && len(d.Buckets) > 0
}

// Settle settles a reservation: tenant t's request was admitted by d with
// its cost, d.Cost, as an estimate, and actual is what it really cost.
// Every bucket of d (the request's classes and ceilings) is charged actual
// - d.Cost more, or refunded d.Cost - actual, in one script call, atomic
// across the buckets, under each bucket's quota as the resolver answers it
// for t now (a tier changed since the admission is settled under its new
// quota; a bucket the resolver no longer names, under the admission's). A
// refund never lifts a balance above its capacity; a charge may take it
// below zero, a debt: the tenant's later requests to those buckets are
// denied (ReasonOverLimit, RetryAfter counting the debt) until the refill
// repays it.
//
// A debt is carried in full unless the bucket's quota caps it
// (quota.Quota.MaxDebt): what a cap forgives is counted
// (tollgate.settles.forgiven) and logged, as a degraded check is. Without
// a cap only the storage floor, 400 days of the bucket's refill, forgives.
// A bucket whose quota has a MaxSettleRatio is charged at most that
// multiple of the estimate: the rest of the actual cost is refused, counted
// (tollgate.settles.refused) and logged, and the debt the charged part
// leaves is carried or capped as any. Settle returns the tokens of the
// actual cost some bucket did not charge (refused plus forgiven, the
// largest over d's buckets): 0 when every bucket took it all.
//
// A reservation is settled once: Settle marks it settled in the store,
// atomically with the buckets, and a repeated Settle of the same Decision
// (a retry after an error whose reply was lost, a report delivered twice)
// changes nothing and returns what the first one did. Any actual counts
// as a repeat: the first settle's figure stands. The mark lives until the
// settle window (WithSettleWindow) has passed since the admission; a
// Settle after that is refused (an error wrapping ErrInvalidRequest,
// nothing settled), as its mark may be gone. A reservation never settled
// stays charged at the estimate. When d has
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
	if !d.Settleable() || actual == d.Cost {
		return 0, nil
	}
	if d.mixedCosts {
		return 0, fmt.Errorf("%w: a decision of a request with AlsoCosts charged its buckets different costs and cannot be settled", ErrInvalidRequest)
	}
	if d.reservation == 0 {
		return 0, fmt.Errorf("%w: the decision names no reservation (it was not made by Check or Reserve): not settled", ErrInvalidRequest)
	}
	left := l.cfg.settleWindow - time.Since(time.Unix(0, d.admitted))
	if left <= 0 {
		return 0, fmt.Errorf("%w: the reservation was admitted %v ago, past the settle window of %v: not settled",
			ErrInvalidRequest, time.Since(time.Unix(0, d.admitted)).Round(time.Millisecond), l.cfg.settleWindow)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.timeout)
	defer cancel()
	quotas := l.settleQuotas(cctx, t, d)
	keys := make([]string, len(d.Buckets), len(d.Buckets)+1)
	refused := make([]int64, len(d.Buckets))
	args := make([]any, 0, 2+4*len(d.Buckets))
	args = append(args, l.nowArg())
	for i, b := range d.Buckets {
		if keys[i], err = l.keys.Bucket(t.ID, b.Name); err != nil {
			return 0, err
		}
		q := quotas[i]
		charged := actual
		if r := q.MaxSettleRatio; r > 0 && float64(actual) > r*float64(d.Cost) {
			charged = int64(math.Floor(r * float64(d.Cost)))
			refused[i] = actual - charged
		}
		a := l.quotas.args.Of(q)
		args = append(args, a[0], a[1], strconv.FormatInt(charged-d.Cost, 10), strconv.FormatInt(q.MaxDebt, 10))
	}
	mark, err := l.keys.Settled(t.ID, d.Buckets[0].Name, d.limiterID+strconv.FormatUint(d.reservation, 36))
	if err != nil {
		return 0, err
	}
	n := len(keys)
	keys = append(keys, mark)
	args = append(args, strconv.FormatInt(max(left.Milliseconds(), 1), 10))
	v, err := settleScript.Run(cctx, l.store.scripts, settleScript.Line(keys, args...))
	if err != nil {
		return 0, l.settleFailed(t, fmt.Errorf("%w: %w", ErrStore, transport.StoreError(cctx, l.cfg.timeout, err)))
	}
	keys = keys[:n]
	a, ok := v.([]any)
	if !ok || len(a) != 2*len(keys) {
		return 0, l.settleFailed(t, fmt.Errorf("%w: settle script reply %T of length %d", errProtocol, v, len(a)))
	}
	var excuse error
	for i, b := range d.Buckets {
		f, ok := a[i].(int64)
		if !ok || f < 0 {
			return 0, l.settleFailed(t, fmt.Errorf("%w: settle script reply element %v", errProtocol, a[i]))
		}
		forgiven = max(forgiven, f+refused[i])
		if f > 0 || refused[i] > 0 {
			l.metrics.settleUncharged(t, d.class, b.Name, f, refused[i])
			excuse = errors.Join(excuse, uncharged(b.Name, quotas[i], d.Cost, refused[i], f))
		}
	}
	if excuse != nil {
		l.logDegraded("tollgate: a settle did not charge the whole actual cost", Request{Tenant: t, Class: d.class}, excuse,
			"actual", actual, "estimate", d.Cost, "uncharged", forgiven)
	}
	if l.path.deny != nil && actual < d.Cost {
		// a refund: a remembered denial may no longer be proved
		l.path.deny.Delete(keys[0])
	}
	return forgiven, nil
}

// newLimiterID returns a random name for a limiter's reservations: 13
// base-36 digits (64 bits), so two limiters' reservations never share a
// mark.
func newLimiterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	id := strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36)
	return strings.Repeat("0", 13-len(id)) + id
}

// uncharged says, for a log, why a settle did not charge bucket (of
// quota q) the whole actual cost of a request of estimate e.
func uncharged(bucket string, q quota.Quota, e, refused, forgiven int64) error {
	var parts []string
	if refused > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens refused (above %v times the estimate %d)", refused, q.MaxSettleRatio, e))
	}
	if forgiven > 0 {
		floor := "the storage floor of 400 days of refill"
		if q.MaxDebt > 0 {
			floor = "its cap of " + strconv.FormatInt(q.MaxDebt, 10)
		}
		parts = append(parts, fmt.Sprintf("%d tokens forgiven (its debt reached %s)", forgiven, floor))
	}
	return fmt.Errorf("bucket %q: %s", bucket, strings.Join(parts, ", "))
}

// settleQuotas returns the quota of each of d's buckets as the resolver
// answers it for t now, or, for a bucket it no longer names (or when it
// fails), the admission's.
func (l *Limiter) settleQuotas(ctx context.Context, t quota.Tenant, d Decision) []quota.Quota {
	qs := make([]quota.Quota, len(d.Buckets))
	for i, b := range d.Buckets {
		qs[i] = b.Quota
	}
	if d.class == "" {
		return qs
	}
	for j := -1; j < len(d.also); j++ {
		class := d.class
		if j >= 0 {
			class = d.also[j]
		}
		bs, _, err := l.resolve(ctx, t, class)
		if err != nil {
			continue
		}
		for _, b := range bs {
			for i := range d.Buckets {
				if d.Buckets[i].Name == b.Name && b.Quota.Validate() == nil {
					qs[i] = b.Quota
				}
			}
		}
	}
	return qs
}

// settleFailed logs (at most once a second, as degraded checks) and counts
// a failed settle of tenant t's reservation, and returns err.
func (l *Limiter) settleFailed(t quota.Tenant, err error) error {
	l.metrics.settleFailed(err)
	l.logDegraded("tollgate: a reservation could not be settled; its estimate stands", Request{Tenant: t}, err)
	return err
}
