package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/shard"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
)

// breakerLayer keeps the store shards' circuit breakers and answers a
// check without the store when its call fails or its shard's circuit is
// open: by the local fallback (WithLocalFallback) or the failure policy. A
// tenant's own successful call resets its fallback buckets.
type breakerLayer struct {
	l      *Limiter
	script *scriptLayer
}

func (bl *breakerLayer) decide(ctx context.Context, c checkCall) (Decision, error) {
	l := bl.l
	if err := ctx.Err(); err != nil {
		return l.callerGone(c.req, err)
	}
	sh := l.shards.ForKey(ctx, c.keys[0])
	ok, probe := sh.Allow(c.sent)
	if !ok {
		err := fmt.Errorf("%w: %w", ErrStore, errCircuitOpen)
		l.metrics.storeCall(ctx, 0, err, l.cfg.policy)
		return l.degrade(c.req, c.keys, c.buckets, err), err
	}
	start := time.Now()
	d, wrote, err := bl.script.call(ctx, &c)
	if err != nil {
		return l.failed(ctx, c.req, c.keys, c.buckets, err, sh, start, wrote, probe)
	}
	sh.Success(wrote)
	l.metrics.storeCall(ctx, time.Since(start), nil, l.cfg.policy)
	if l.fallback != nil {
		l.fallback.forget(c.keys) // the store answers this tenant again
	}
	return d, nil
}

// failed answers a check whose store call failed, by what failed. A caller
// gone is no failure: its check is abandoned, not degraded, and nothing is
// counted or logged. A check this process could not send in time, or whose
// reply came late while the shard kept answering other checks, is shed
// (ReasonOverloaded): the store is not at fault, so neither the breaker nor
// the failure policy hears of it. A failure of the request's own (an error
// reply about its keys) is answered by the failure policy and logged with
// its keys, but the store answered, so for the breaker it is a success.
// Only the store's own failures count toward the breaker of the shard sh.
// start is when the call began, wrote when its command was sent; probe:
// this call was the breaker's probe.
func (l *Limiter) failed(ctx context.Context, req Request, ks []string, buckets []quota.Bucket, err error, sh *shard.Shard, start, wrote time.Time, probe bool) (Decision, error) {
	var gone *callerGone
	if errors.As(err, &gone) {
		sh.Abandon(probe)
		return Decision{Reason: ReasonCanceled, Cost: req.Cost}, gone
	}
	var late *replyTimeout
	if errors.As(err, &late) || errors.Is(err, transport.ErrStalled) {
		if !sh.KnownDown(time.Now()) && !(late != nil && sh.AnsweredSince(wrote)) {
			sh.Confirm(ctx) // ask the store itself, once for every check that asks meanwhile
			if ctx.Err() != nil {
				sh.Abandon(probe)
				return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &callerGone{ctx.Err()}
			}
		}
		if !sh.KnownDown(time.Now()) {
			err = &transport.ShedError{Cause: "late_reply", Why: "no reply within the timeout, while the store answered others: " + err.Error()}
		}
	}
	var shed *transport.ShedError
	if errors.As(err, &shed) {
		sh.Abandon(probe)
		return l.shed(ctx, req, shed)
	}
	l.metrics.storeCall(ctx, time.Since(start), err, l.cfg.policy)
	var re *requestError
	if errors.As(err, &re) {
		sh.Success(wrote)
		err = fmt.Errorf("%w: %w", ErrStore, err)
		d := l.degradeQuiet(req, ks, buckets)
		l.logDegraded("tollgate: the store refused this request; answered by the failure policy", req, err,
			"decision", outcome(d), "key", strings.Join(ks, " "))
		return d, err
	}
	err = fmt.Errorf("%w: %w", ErrStore, err)
	if sh.Failure(l.now()) {
		l.logDegraded("tollgate: circuit breaker opened: store calls paused", req, err)
	}
	return l.degrade(req, ks, buckets, err), err
}

// shed is the answer to a check this process could not make in time: not
// admitted under any failure policy, counted by cause.
func (l *Limiter) shed(ctx context.Context, req Request, why *transport.ShedError) (Decision, error) {
	l.metrics.shedCheck(ctx, why)
	return Decision{Reason: ReasonOverloaded, Cost: req.Cost}, why
}

// callerGone is the decision of a check whose caller left first.
func (l *Limiter) callerGone(req Request, err error) (Decision, error) {
	return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &callerGone{err}
}

// degrade answers without the store: from the local fallback buckets when
// configured (and the quota is known), else by the failure policy. It logs,
// at most once a second: a degraded decision is never silent.
func (l *Limiter) degrade(req Request, ks []string, buckets []quota.Bucket, err error) Decision {
	d := l.degradeQuiet(req, ks, buckets)
	l.logDegraded("tollgate: rate limit check degraded", req, err, "decision", outcome(d))
	return d
}

// degradeQuiet is degrade's answer, without the log.
func (l *Limiter) degradeQuiet(req Request, ks []string, buckets []quota.Bucket) Decision {
	switch {
	case l.fallback != nil && buckets != nil:
		d := l.fallback.takeShare(ks, buckets, l.cfg.fallbackShare, req.Cost, l.now())
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
		attrs = append(attrs, "tenant", keys.EscapeID(req.Tenant.ID), "class", req.Class, "policy", l.cfg.policy.String(), "err", err)
		l.cfg.log.Warn(msg, attrs...)
	}
}
