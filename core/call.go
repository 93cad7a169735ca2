package core

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// store charges cost tokens (req.Cost, or a lease's size) in the store, or
// degrades when it fails. sent is when the check started.
func (l *Limiter) store(ctx context.Context, req Request, keys []string, buckets []Bucket, cost int64, sent time.Time) (Decision, error) {
	if err := ctx.Err(); err != nil {
		if context.Cause(ctx) == errLimiterTimeout {
			// the limiter's own deadline (a lease wait used it up), not
			// the caller's: the failure policy answers
			err := fmt.Errorf("%w: no answer within %v: %w", ErrStore, l.cfg.timeout, context.DeadlineExceeded)
			return l.degrade(req, keys, buckets, err), err
		}
		return l.callerGone(req, err)
	}
	ok, probe := l.breaker.allow(sent)
	if !ok {
		err := fmt.Errorf("%w: %w", ErrStore, errCircuitOpen)
		l.metrics.storeCall(ctx, 0, err, l.cfg.policy)
		return l.degrade(req, keys, buckets, err), err
	}
	now := ""
	if l.cfg.clock != nil {
		now = strconv.FormatInt(sent.UnixMicro(), 10)
	}
	var one [1][3]any
	quotas := one[:0]
	for _, b := range buckets {
		quotas = append(quotas, l.quotaArgs(b.Quota))
	}
	start := time.Now()
	args := scriptArgs(keys, now, cost, quotas)
	reply, err := l.run(ctx, *args)
	if err == nil {
		// answered: neither go-redis nor a batch holds the line any more (a
		// caller that gave up leaves it to the batch still holding it)
		putArgs(args)
	}
	var d Decision
	if err == nil {
		if d, err = parseReply(reply, buckets, cost); err != nil {
			err = &requestError{err}
		}
	}
	if err != nil {
		return l.failed(ctx, req, keys, buckets, err, time.Since(start), probe)
	}
	l.metrics.storeCall(ctx, time.Since(start), nil, l.cfg.policy)
	l.breaker.success()
	if l.fallback != nil {
		l.fallback.reset()
	}
	if l.deny != nil && d.Reason == ReasonOverLimit && cost == req.Cost {
		l.deny.remember(keys, d, sent)
	}
	return d, nil
}

// quotaArgs returns a quota's script arguments (capacity, rate, TTL),
// formatted once per quota: quotas are few, checks many.
func (l *Limiter) quotaArgs(q Quota) [3]any {
	if v, ok := l.args.Load(q); ok {
		return v.([3]any)
	}
	a := [3]any{strconv.FormatInt(q.Capacity, 10), strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64), q.ttlMillis()}
	if l.nargs.Load() < maxCachedSets {
		if _, loaded := l.args.LoadOrStore(q, a); !loaded {
			l.nargs.Add(1)
		}
	}
	return a
}

// run calls the script within the limiter's timeout, once (see runScript
// and noRetryCmd), and names a failure for what it was (see storeError).
// When the caller's own deadline comes first, it alone bounds the call: a
// context of the limiter's would never fire, and a failure at that deadline
// is the caller's (storeError tells so from ctx alone).
func (l *Limiter) run(ctx context.Context, args []any) (any, error) {
	call := ctx
	if d, ok := ctx.Deadline(); !ok || !d.Before(time.Now().Add(l.cfg.timeout)) {
		var cancel context.CancelFunc
		call, cancel = context.WithTimeoutCause(ctx, l.cfg.timeout, errLimiterTimeout)
		defer cancel()
	}
	var v any
	var err error
	if l.batch != nil {
		v, err = l.batch.do(call, args)
	} else {
		v, err = runScript(call, l.scripts, args)
	}
	if err != nil {
		err = storeError(ctx, call, l.cfg.timeout, err)
	}
	return v, err
}
