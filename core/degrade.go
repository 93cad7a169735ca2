package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// failed answers a check whose store call failed, by what failed. A caller
// gone is no failure: its check is abandoned, not degraded, and nothing is
// counted or logged. A failure of the request's own (an error reply about
// its keys) is answered by the failure policy and logged with its keys, but
// the store answered, so for the breaker it is a success. Only the store's
// own failures count toward the breaker. probe: this call was the breaker's
// probe.
func (l *Limiter) failed(ctx context.Context, req Request, keys []string, buckets []Bucket, err error, took time.Duration, probe bool) (Decision, error) {
	var gone *callerGone
	if errors.As(err, &gone) {
		l.breaker.abandon(probe)
		return Decision{Reason: ReasonCanceled, Cost: req.Cost}, gone
	}
	l.metrics.storeCall(ctx, took, err, l.cfg.policy)
	var re *requestError
	if errors.As(err, &re) {
		l.breaker.success()
		err = fmt.Errorf("%w: %w", ErrStore, err)
		d := l.degradeQuiet(req, keys, buckets)
		l.logDegraded("tollgate: the store refused this request; answered by the failure policy", req, err,
			"decision", outcome(d), "key", strings.Join(keys, " "))
		return d, err
	}
	if l.batch == nil {
		refreshTopology(l.client, err) // the batcher does this itself
	}
	err = fmt.Errorf("%w: %w", ErrStore, err)
	if l.breaker.failure(l.now()) {
		l.logDegraded("tollgate: circuit breaker opened: store calls paused", req, err)
	}
	return l.degrade(req, keys, buckets, err), err
}

// callerGone is the decision of a check whose caller left first.
func (l *Limiter) callerGone(req Request, err error) (Decision, error) {
	return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &callerGone{err}
}

// degrade answers without the store: from the local fallback buckets when
// configured (and the quota is known), else by the failure policy. It logs,
// at most once a second: a degraded decision is never silent.
func (l *Limiter) degrade(req Request, keys []string, buckets []Bucket, err error) Decision {
	d := l.degradeQuiet(req, keys, buckets)
	l.logDegraded("tollgate: rate limit check degraded", req, err, "decision", outcome(d))
	return d
}

// degradeQuiet is degrade's answer, without the log.
func (l *Limiter) degradeQuiet(req Request, keys []string, buckets []Bucket) Decision {
	switch {
	case l.fallback != nil && buckets != nil:
		d := l.fallback.takeShare(keys, buckets, l.cfg.fallbackShare, req.Cost, l.now())
		d.Fallback = true
		return d
	case l.cfg.policy == FailClosed:
		return Decision{Reason: ReasonFailedClosed, Cost: req.Cost}
	}
	return Decision{Reason: ReasonFailedOpen, Allowed: true, Cost: req.Cost}
}

func (l *Limiter) logDegraded(msg string, req Request, err error, attrs ...any) {
	now := time.Now().UnixNano()
	if last := l.lastLog.Load(); now-last >= int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
		attrs = append(attrs, "tenant", EscapeID(req.Tenant.ID), "class", req.Class, "policy", l.cfg.policy.String(), "err", err)
		l.cfg.log.Warn(msg, attrs...)
	}
}
