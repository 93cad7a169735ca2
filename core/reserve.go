package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
)

// reserveScript reserves and cancels. Only Reserve and Cancel send it,
// straight through the limiter's client, as Settle sends its script: the
// check path's leases, deny cache, batcher and breakers are untouched.
var reserveScript = transport.NewScript(lua.Reserve())

// maxReserveWait is the longest wait a reservation may be granted: its
// debt stays far above the storage floor of the scripts.
const maxReserveWait = 24 * time.Hour

// DefaultMaxWait is the longest [Limiter.Wait] waits when its context has
// no deadline, unless [WithMaxWait] says otherwise.
const DefaultMaxWait = time.Minute

// WithMaxWait sets the longest [Limiter.Wait] waits when its context has no
// deadline (with a deadline, the time left until it). It must be 0 to 24
// hours; 0: Wait never waits, it admits only a request the buckets hold
// now. Default DefaultMaxWait.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > maxReserveWait {
			return badOption("WithMaxWait", "max wait %v is not 0 to %v", d, maxReserveWait)
		}
		c.maxWait, c.maxWaitSet = d, true
		return nil
	})
}

// Reservation is a request's tokens, reserved by [Limiter.Reserve]: charged
// at once, to be used at its time.
type Reservation struct {
	// Decision is the reservation's answer. Allowed: the caller may proceed
	// at Time (ReasonOK: reserved; ReasonFailedOpen or ReasonShadowDenied:
	// at once, nothing reserved). Not allowed: nothing was charged;
	// ReasonOverLimit when the wait would have exceeded the max wait
	// (RetryAfter is how much sooner the buckets would have to refill for
	// it to fit), ReasonCostExceedsCapacity when the cost can never fit, or
	// the reason a check would give (invalid, unresolved, failed closed,
	// canceled). A reserved Decision's buckets hold their balance after
	// the charge, possibly below zero, and it settles as any admission
	// ([Limiter.Settle]).
	Decision Decision

	at     time.Time // when the caller may proceed, on this process's clock
	l      *Limiter
	tenant quota.Tenant
	keys   []string
	args   []any  // each bucket's capacity, rate and cost, as the script takes them
	act    string // the time to act by the store's clock, microseconds; "": nothing reserved

	mu   sync.Mutex
	done bool // cancelled, or the cancel's call made
}

// Time returns when the caller may proceed, by this process's clock: the
// store's time to act, carried over as the duration from the store's time
// of the reservation to it, counted from when the reply arrived. Zero when
// the reservation was refused.
func (r *Reservation) Time() time.Time { return r.at }

// Delay returns how long from now until Time; 0 once it has passed or when
// the reservation was refused.
func (r *Reservation) Delay() time.Duration {
	if r.at.IsZero() {
		return 0
	}
	return max(0, time.Until(r.at))
}

// Reserve reserves req's tokens for a time not later than maxWait from now.
// The store charges every bucket of req at once, all or nothing as Check
// does, even a bucket whose balance is below the cost: its balance goes
// below zero, by at most its rate x maxWait, and the caller waits until
// the refill would have covered the cost (the largest such time over the
// buckets). A wait longer than maxWait is refused and nothing is charged;
// a cost above a bucket's capacity is refused as never. Reservations are
// first come, first served across every process, in the order the store
// granted them: each one's time is at or after the previous one's on the
// same bucket, by the store's clock. Checks of the same buckets are denied
// while reservations wait: their balance is below zero.
//
// The store's clock (the Redis server's, or WithClock's) decides every time;
// this process only waits the duration the store stated, from when the
// reply arrived, so the hosts' wall clocks may disagree without effect. A
// caller proceeds no earlier than its time to act and later by the time
// the reply took to arrive (below the check timeout, else the call fails)
// plus the lateness of its timer: that is the bound on how far two callers
// may be out of the store's order, and on how many tokens a window of
// arrivals may see beyond capacity + rate x window. With WithClock the
// times come from each caller's clock, and their skew adds to the bound.
//
// maxWait must be 0 to 24 hours; 0 admits only what the buckets hold now.
// A bucket with a concurrency limit cannot be reserved (ErrInvalidRequest).
// The call goes straight to the store, bounded by the check timeout and by
// ctx: no lease, deny cache, batcher, breaker or local fallback answers
// it. When the store fails, the failure policy answers: open, the caller
// proceeds at once, unchecked (ReasonFailedOpen, counted and logged);
// closed, it does not (ReasonFailedClosed); the error wraps ErrStore
// either way. Errors are as Check's; the Reservation is always usable.
func (l *Limiter) Reserve(ctx context.Context, req Request, maxWait time.Duration) (*Reservation, error) {
	r, err := l.reserve(ctx, req, maxWait)
	if !r.Decision.Allowed && r.Decision.Denied() && l.shadowed(req) {
		r.Decision.Allowed, r.Decision.Reason, r.at = true, ReasonShadowDenied, time.Now()
	}
	l.metrics.record(ctx, req, r.Decision)
	return r, err
}

func (l *Limiter) reserve(ctx context.Context, req Request, maxWait time.Duration) (*Reservation, error) {
	if req.Class == "" {
		req.Class = quota.DefaultClass
	}
	r := &Reservation{l: l, tenant: req.Tenant}
	fail := func(reason Reason, err error) (*Reservation, error) {
		r.Decision = Decision{Reason: reason, Cost: req.Cost, class: req.Class, also: req.Also}
		return r, err
	}
	if maxWait < 0 || maxWait > maxReserveWait {
		return fail(ReasonInvalid, fmt.Errorf("%w: max wait %v is not 0 to %v", ErrInvalidRequest, maxWait, maxReserveWait))
	}
	if err := l.validate(req); err != nil {
		return fail(ReasonInvalid, err)
	}
	buckets, costs, err := l.reserveBuckets(ctx, req)
	if err != nil {
		if errors.Is(err, ErrInvalidRequest) {
			return fail(ReasonInvalid, err)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrResolve) && !errors.Is(err, quota.ErrInvalid) {
			return fail(ReasonCanceled, &transport.CallerGone{Err: ctx.Err()})
		}
		if errors.Is(err, ErrResolve) || errors.Is(err, quota.ErrInvalid) {
			l.logDegraded("tollgate: no quota configured for this request; rejected", req, err, "tier", keys.EscapeID(req.Tenant.Tier))
			return fail(ReasonUnresolved, err)
		}
		return l.reserveFailed(r, req, fmt.Errorf("%w: resolve: %w", ErrStore, err))
	}
	r.keys = make([]string, 0, 2*len(buckets))
	r.args = make([]any, 0, 3*len(buckets))
	for i, b := range buckets {
		k, err := l.keys.Bucket(req.Tenant.ID, b.Name)
		if err != nil {
			return fail(ReasonInvalid, err)
		}
		last, _ := l.keys.Reserved(req.Tenant.ID, b.Name) // valid as k is
		a := l.quotas.args.Of(b.Quota)
		r.keys = append(r.keys, k, last)
		r.args = append(r.args, a[0], a[1], strconv.FormatInt(costs[i], 10))
	}
	args := append([]any{l.nowArg(), "r", strconv.FormatInt(maxWait.Microseconds(), 10)}, r.args...)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	v, err := reserveScript.Run(cctx, l.store.scripts, reserveScript.Line(r.keys, args...))
	arrived := time.Now()
	if err == nil {
		err = r.read(v, buckets, req, maxWait, arrived)
	} else if ctx.Err() != nil {
		// the caller left: the store may or may not have reserved
		return fail(ReasonCanceled, &transport.CallerGone{Err: ctx.Err()})
	} else {
		err = transport.StoreError(ctx, l.cfg.timeout, err)
	}
	if err != nil {
		return l.reserveFailed(r, req, fmt.Errorf("%w: %w", ErrStore, err))
	}
	return r, nil
}

// read makes r's decision from the script's reply, received at arrived.
func (r *Reservation) read(v any, buckets []quota.Bucket, req Request, maxWait time.Duration, arrived time.Time) error {
	a, ok := v.([]any)
	if !ok || len(a) != 4+len(buckets) {
		return fmt.Errorf("%w: reserve script reply %T of length %d", errProtocol, v, len(a))
	}
	status, ok1 := a[0].(int64)
	binding, ok2 := a[1].(int64)
	nowS, ok3 := a[2].(string)
	atS, ok4 := a[3].(string)
	now, err1 := strconv.ParseInt(nowS, 10, 64)
	at, err2 := strconv.ParseInt(atS, 10, 64)
	if !ok1 || !ok2 || !ok3 || !ok4 || err1 != nil || err2 != nil || status < 0 || status > 2 || binding < 1 || int(binding) > len(buckets) {
		return fmt.Errorf("%w: reserve script reply header %v", errProtocol, a[:4])
	}
	states := make([]stack.Bucket, len(buckets))
	for i, b := range buckets {
		s, ok := a[4+i].(string)
		if !ok {
			return fmt.Errorf("%w: reserve script reply element %T, want a string", errProtocol, a[4+i])
		}
		num, stamp, _ := strings.Cut(s, " ")
		tokens, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return fmt.Errorf("%w: reserve script reply element %q", errProtocol, s)
		}
		states[i] = stack.Bucket{Name: b.Name, Quota: b.Quota, Tokens: tokens}
		if us, err := strconv.ParseInt(stamp, 10, 64); err == nil && stamp != "" {
			states[i].Stamp = time.UnixMicro(us)
		}
	}
	res := stack.Result{Verdict: stack.OK, Buckets: states, Binding: int(binding - 1), Cost: req.Cost}
	switch status {
	case 0:
		r.act = atS
		r.at = arrived.Add(time.Duration(at-now) * time.Microsecond)
	case 1:
		// at is the wait the buckets would have asked
		res.Verdict, res.Retry = stack.OverLimit, time.Duration(at)*time.Microsecond-maxWait
	case 2:
		res.Verdict = stack.CostExceedsCapacity
	}
	call := stack.Call{}
	if req.mixed() {
		call.Costs = []int64{} // the buckets were charged different costs
	}
	r.Decision = r.l.answer(&req, &call, res)
	r.l.nameReservation(&r.Decision)
	return nil
}

// reserveFailed answers a reservation the store did not: by the failure
// policy, logged at most once a second.
func (l *Limiter) reserveFailed(r *Reservation, req Request, err error) (*Reservation, error) {
	r.act = ""
	if l.cfg.policy == FailClosed {
		r.Decision = Decision{Reason: ReasonFailedClosed, Cost: req.Cost}
	} else {
		r.Decision = Decision{Reason: ReasonFailedOpen, Allowed: true, Cost: req.Cost}
		r.at = time.Now()
	}
	l.logDegraded("tollgate: a reservation was answered by the failure policy", req, err, "decision", outcomeLabel(r.Decision))
	return r, err
}

// reserveBuckets resolves every bucket of req (Class's, then Also's; a
// bucket two classes share, once) and the cost each is charged: the
// largest of the classes that name it.
func (l *Limiter) reserveBuckets(ctx context.Context, req Request) ([]quota.Bucket, []int64, error) {
	var buckets []quota.Bucket
	var costs []int64
	for j := -1; j < len(req.Also); j++ {
		cost := req.Cost
		if j >= 0 && req.AlsoCosts != nil {
			cost = req.AlsoCosts[j]
		}
		bs, err := l.buckets(ctx, req, 1+j)
		if err == nil {
			err = validateBuckets(bs)
		}
		if err != nil {
			return nil, nil, err
		}
		for _, b := range bs {
			if b.Quota.Concurrency > 0 {
				return nil, nil, fmt.Errorf("%w: %w", ErrInvalidRequest, slotBucketError(b.Name))
			}
			i := slices.IndexFunc(buckets, func(have quota.Bucket) bool { return have.Name == b.Name })
			if i < 0 {
				buckets = append(buckets, b)
				costs = append(costs, cost)
			} else {
				costs[i] = max(costs[i], cost)
			}
		}
	}
	return buckets, costs, nil
}

// Cancel gives a reservation's tokens back, as far as later reservations
// allow, by x/time/rate's rule (Reservation.CancelAt): at or after its
// time, nothing (the tokens are taken). Before it, each bucket gets back
// the cost minus what later reservations of the bucket were granted
// against it: cost - rate x (last - time), where time is the
// reservation's time to act and last the latest time to act of the
// bucket's reservations (later reservations keep their times, so what
// they counted on stays charged); at most its cost, nothing when that is
// not above zero, and never above the bucket's capacity. When the
// reservation was its bucket's latest, the bucket's latest time moves back
// by cost / rate (not before now). The times are the store's.
//
// Cancel once: a second call, and a call on a reservation that reserved
// nothing (refused, failed open, shadow), does nothing and returns nil.
// The call is bounded by the check timeout, not by ctx's cancellation. A
// store failure returns an error wrapping ErrStore, and the tokens stay
// charged. Cancel before Settle: a settled reservation's cost has changed.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.act == "" {
		return nil
	}
	r.done = true
	l := r.l
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.timeout)
	defer cancel()
	args := append([]any{l.nowArg(), "c", r.act}, r.args...)
	v, err := reserveScript.Run(cctx, l.store.scripts, reserveScript.Line(r.keys, args...))
	if err == nil {
		if a, ok := v.([]any); !ok || len(a) != len(r.keys)/2 {
			err = fmt.Errorf("%w: cancel script reply %T of length %d", errProtocol, v, len(a))
		}
	} else {
		err = transport.StoreError(cctx, l.cfg.timeout, err)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrStore, err)
		l.logDegraded("tollgate: a reservation could not be cancelled; its tokens stay charged", Request{Tenant: r.tenant, Class: r.Decision.class}, err)
		return err
	}
	if l.path.deny != nil {
		// tokens given back: a remembered denial may no longer be proved
		l.path.deny.Delete(r.keys[0])
	}
	return nil
}

// Wait reserves req's tokens and blocks until their time, as
// x/time/rate's Limiter.Wait does for one process, but for the whole fleet
// (see [Limiter.Reserve] for the bound and the order). The max wait is the
// time left until ctx's deadline when it has one, else WithMaxWait's
// (DefaultMaxWait). The caller proceeds when the Decision is Allowed:
// reserved and its time come (ReasonOK), or the store failed and the
// policy is open (ReasonFailedOpen, at once, the error wrapping ErrStore).
// Not allowed: refused, as Reserve refuses, without waiting (over the max
// wait: ReasonOverLimit with a nil error, as Check's denials), or ctx ended
// first: ReasonCanceled, the error wrapping ctx's, and the reservation
// cancelled (see Reservation.Cancel). An admitted Decision settles as any.
func (l *Limiter) Wait(ctx context.Context, req Request) (Decision, error) {
	maxWait := l.cfg.maxWait
	if !l.cfg.maxWaitSet {
		maxWait = DefaultMaxWait
	}
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(max(0, time.Until(dl)), maxReserveWait)
	}
	r, err := l.Reserve(ctx, req, maxWait)
	if err != nil || !r.Decision.Allowed {
		return r.Decision, err
	}
	delay := r.Delay()
	if delay <= 0 {
		return r.Decision, nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Decision, nil
	case <-ctx.Done():
		_ = r.Cancel(ctx) // logged; the tokens stay charged when it fails
		return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &transport.CallerGone{Err: ctx.Err()}
	}
}
