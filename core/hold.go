package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// slotBucketError is Reserve's refusal of a bucket with a concurrency
// limit; Hold answers such a request with a check instead.
type slotBucketError string

func (e slotBucketError) Error() string {
	return fmt.Sprintf("bucket %q has a concurrency limit, which a reservation cannot take", string(e))
}

// Hold answers req as Check does, except that a request the buckets cannot
// admit now but could within maxWait is reserved ([Limiter.Reserve]) and
// held here until its time, then admitted: a tenant slightly over its
// rate is served a little later instead of refused. held is how long the
// call waited for the reservation's time (0 when admitted at once or
// refused). A wait longer than maxWait is refused as Reserve refuses it
// (ReasonOverLimit, nothing charged). When ctx ends during the hold the
// reservation is cancelled, giving back what Reservation.Cancel allows,
// and the answer is ReasonCanceled with an error wrapping ctx's.
//
// A request with a bucket that has a concurrency limit is not held: it is
// checked (Check), and so is a request in shadow mode (WithShadow,
// WithShadowClasses), which is never delayed. The decision is counted once in the decisions metric;
// a hold is recorded in tollgate.hold.duration by its result (served,
// canceled). maxWait must be 0 to 24 hours. Like Reserve, the request goes
// straight to the store: no lease, deny cache or batcher answers it.
func (l *Limiter) Hold(ctx context.Context, req Request, maxWait time.Duration) (d Decision, held time.Duration, err error) {
	if l.shadowed(req) {
		// shadow mode enforces nothing, a delay included
		d, err := l.Check(ctx, req)
		return d, 0, err
	}
	r, err := l.reserve(ctx, req, maxWait)
	var slots slotBucketError
	if errors.As(err, &slots) {
		d, err := l.Check(ctx, req)
		return d, 0, err
	}
	l.metrics.record(ctx, req, r.Decision)
	if err != nil || !r.Decision.Allowed {
		return r.Decision, 0, err
	}
	delay := r.Delay()
	if delay <= 0 {
		return r.Decision, 0, nil
	}
	start := time.Now()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		held = time.Since(start)
		l.metrics.hold(req, held, "served")
		return r.Decision, held, nil
	case <-ctx.Done():
		_ = r.Cancel(ctx) // logged; the tokens stay charged when it fails
		held = time.Since(start)
		l.metrics.hold(req, held, "canceled")
		return Decision{Reason: ReasonCanceled, Cost: req.Cost}, held, &transport.CallerGone{Err: ctx.Err()}
	}
}
