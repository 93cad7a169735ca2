package core

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/denycache"
	"github.com/tollgate-go/tollgate/core/internal/fallback"
	"github.com/tollgate-go/tollgate/core/internal/guard"
	"github.com/tollgate-go/tollgate/core/internal/lease"
	"github.com/tollgate-go/tollgate/core/internal/scriptcall"
	"github.com/tollgate-go/tollgate/core/internal/slots"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/keys"
)

// The check path is a stack of layers (internal/stack's Layer), composed
// once in New, each in the package that owns its feature and holding only
// its own state, the values it needs and the next layer:
//
//	layer        package               holds
//	leases       internal/lease        the lease map
//	deny cache   internal/denycache    the cache of proven denials
//	guard        internal/guard        the shards' breakers, the local fallback, the failure policy
//	slots        internal/slots        the slot group, the retry bound, the forgets of unanswered slots
//	script call  internal/scriptcall   the transport (batched or direct), the quotas' script arguments
//
// A layer that is off is not in the stack. A check is resolved before it
// enters (its buckets, keys and costs: a stack.Call, passed as data), goes
// down once, each layer answering it or handing it on, and its answer (a
// stack.Result) comes back up once; answer (decision.go) turns it into the
// Decision.

// checkPath is the check path's top layer, and the narrow handles of the
// layers' state that New's callers reach: the guard's answer without the
// store (a resolver's failure), the deny cache's and the leases' forgets
// (Settle, Reset) and the slot forgets' close.
type checkPath struct {
	top     stack.Layer
	guard   *guard.Layer
	deny    *denycache.Cache // nil: off
	leases  *lease.Map       // nil: no class leases
	forgets *slots.Forgets
}

// stack composes the check path from the limiter's settings: the script
// call at the bottom, the slots and the guard above it, then the deny
// cache and leases when they are on.
func (l *Limiter) stack() {
	cfg := &l.cfg
	var top stack.Layer = scriptcall.New(l.store.calls, cfg.timeout, cfg.clock != nil, l.quotas.args, cfg.slotLease)
	l.path.forgets = slots.NewForgets(l.store.scripts, scriptcall.Concurrency, cfg.timeout, cfg.slotLease, cfg.clock,
		slots.Hooks{Labels: l.metrics.slotSet, Expired: l.metrics.slotExpired, Log: l.log.plain})
	top = slots.NewLayer(cfg.slotGroup, cfg.slotRetry, l.path.forgets, top)
	var fb *fallback.Buckets
	if cfg.fallbackShare > 0 {
		fb = fallback.New(cfg.fallbackShare, 100_000)
	}
	l.path.guard = guard.New(l.store.shards, fb, cfg.policy == FailClosed, ErrStore, l.now,
		guard.Hooks{Log: l.log.call, Shed: l.metrics.shedCheck}, top)
	top = l.path.guard
	if cfg.denyCache {
		l.path.deny = denycache.New(100_000, cfg.timeout) // a refund elsewhere is seen within a check timeout
		top = denycache.NewLayer(l.path.deny, l.metrics.denyCacheHit, top)
	}
	if len(cfg.leases) > 0 {
		l.path.leases = lease.New(cfg.leases, 100_000)
		top = lease.NewLayer(l.path.leases, l.now, top)
	}
	l.path.top = top
}

// degradedLog logs degraded and refused checks and failed slot and settle
// calls, at most once a second: a degraded decision is never silent, and an
// outage does not flood the log.
type degradedLog struct {
	last   atomic.Int64 // when it last logged, in Unix nanoseconds
	log    *slog.Logger
	policy string
}

func (dl *degradedLog) warn(msg, tenant, class string, err error, attrs ...any) {
	now := time.Now().UnixNano()
	if last := dl.last.Load(); now-last >= int64(time.Second) && dl.last.CompareAndSwap(last, now) {
		attrs = append(attrs, "tenant", keys.EscapeID(tenant), "class", class, "policy", dl.policy, "err", err)
		dl.log.Warn(msg, attrs...)
	}
}

// call logs about call c (the guard's hook).
func (dl *degradedLog) call(msg string, c stack.Call, err error, attrs ...any) {
	dl.warn(msg, c.Tenant.ID, c.Class, err, attrs...)
}

// plain logs about no one request (the slot forgets' hook).
func (dl *degradedLog) plain(msg string, err error, attrs ...any) {
	dl.warn(msg, "", "", err, attrs...)
}

// logDegraded logs about req (see degradedLog).
func (l *Limiter) logDegraded(msg string, req Request, err error, attrs ...any) {
	l.log.warn(msg, req.Tenant.ID, req.Class, err, attrs...)
}

// canceled is the decision of a check whose caller left first.
func canceled(req Request, err error) (Decision, error) {
	return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &transport.CallerGone{Err: err}
}
