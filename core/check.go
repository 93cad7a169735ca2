package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Allow checks and charges cost tokens of tenant t's class buckets. See
// [Limiter.Check].
func (l *Limiter) Allow(ctx context.Context, t quota.Tenant, class string, cost int64) (Decision, error) {
	return l.Check(ctx, Request{Tenant: t, Class: class, Cost: cost})
}

// Peek reports the state of tenant t's class buckets without charging them.
func (l *Limiter) Peek(ctx context.Context, t quota.Tenant, class string) (Decision, error) {
	return l.Check(ctx, Request{Tenant: t, Class: class})
}

// Check answers one request. Over quota is not an error: it is a Decision
// with Allowed false. The error is non-nil when the request is invalid
// (wrapping ErrInvalidRequest; the Decision has ReasonInvalid), when its
// quota is not configured (an unknown tier or class, an invalid quota:
// wrapping ErrResolve or ErrInvalidQuota; ReasonUnresolved, not admitted:
// a configuration mistake never turns into unlimited traffic), or when the
// store or a custom resolver's backend failed (wrapping ErrStore; the
// Decision carries the failure policy's answer, ReasonFailedOpen or
// ReasonFailedClosed, or the local fallback's; a Redis error reply about
// this request's own keys, such as WRONGTYPE, is answered so too but never
// counts toward the circuit breaker), or when the caller's context ended
// before the store answered (ReasonCanceled, not admitted, not degraded;
// the error wraps the context's error, not ErrStore). The Decision is
// always usable.
func (l *Limiter) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := l.check(ctx, req)
	l.nameReservation(&d)
	if !d.Allowed && d.Denied() && l.shadowed(req) {
		d.Allowed, d.Reason = true, ReasonShadowDenied
	}
	l.metrics.record(ctx, req, d)
	return d, err
}

// nameReservation names d for Settle when the store admitted it (a
// peek's included: rls refunds a negative hit by settling a peek given the
// hit's cost).
func (l *Limiter) nameReservation(d *Decision) {
	if d.Reason == ReasonOK && !d.Fallback && len(d.Buckets) > 0 {
		d.limiterID, d.reservation, d.admitted = l.store.reservations.id, l.store.reservations.next.Add(1), time.Now().UnixNano()
	}
}

// shadowed reports whether shadow mode applies to req: to every request, or
// to one of its classes.
func (l *Limiter) shadowed(req Request) bool {
	if l.cfg.shadow || l.cfg.shadowClasses[orDefault(req.Class)] {
		return true
	}
	for _, class := range req.Also {
		if l.cfg.shadowClasses[class] {
			return true
		}
	}
	return false
}

func (l *Limiter) check(ctx context.Context, req Request) (Decision, error) {
	if req.Class == "" {
		req.Class = quota.DefaultClass
	}
	if err := l.validate(req); err != nil {
		return Decision{Reason: ReasonInvalid, Cost: req.Cost}, err
	}
	buckets, err := l.buckets(ctx, req, 0)
	if err == nil {
		err = validateBuckets(buckets)
	}
	// the resolver's slice may be shared: appending must not write into it
	buckets = slices.Clip(buckets)
	// costs, for a mixed-cost request, is each bucket's cost: the largest
	// cost of the classes that name it
	var costs []int64
	mixed := req.mixed()
	if mixed {
		costs = make([]int64, len(buckets), len(buckets)+len(req.Also))
		for i := range costs {
			costs[i] = req.Cost
		}
	}
	for j := range req.Also {
		if err != nil {
			break
		}
		var more []quota.Bucket
		if more, err = l.buckets(ctx, req, 1+j); err == nil {
			err = validateBuckets(more)
		}
		for _, b := range more {
			i := slices.IndexFunc(buckets, func(have quota.Bucket) bool { return have.Name == b.Name })
			if i < 0 {
				buckets = append(buckets, b)
				if mixed {
					costs = append(costs, req.AlsoCosts[j])
				}
			} else if mixed {
				costs[i] = max(costs[i], req.AlsoCosts[j])
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrResolve) && !errors.Is(err, quota.ErrInvalid) {
			return canceled(req, ctx.Err())
		}
		if errors.Is(err, ErrResolve) || errors.Is(err, quota.ErrInvalid) {
			l.logDegraded("tollgate: no quota configured for this request; rejected", req, err, "tier", keys.EscapeID(req.Tenant.Tier))
			return Decision{Reason: ReasonUnresolved, Cost: req.Cost}, err
		}
		// a custom resolver's own backend failed: a store failure
		err = fmt.Errorf("%w: resolve: %w", ErrStore, err)
		r := l.path.guard.Degrade(stack.Call{Tenant: req.Tenant, Class: req.Class, Also: req.Also, Cost: req.Cost}, err)
		return l.answer(&req, &stack.Call{}, r), err
	}
	ks := make([]string, len(buckets))
	for i, b := range buckets {
		if ks[i], err = l.keys.Bucket(req.Tenant.ID, b.Name); err != nil {
			return Decision{Reason: ReasonInvalid, Cost: req.Cost}, err
		}
	}
	c := stack.Call{Tenant: req.Tenant, Class: req.Class, Also: req.Also, Cost: req.Cost, Charge: req.Cost,
		Costs: costs, Keys: ks, Buckets: buckets, Sent: l.now()}
	if ci, err := concurrentBucket(buckets); err != nil {
		l.logDegraded("tollgate: no quota configured for this request; rejected", req, err, "tier", keys.EscapeID(req.Tenant.Tier))
		return Decision{Reason: ReasonUnresolved, Cost: req.Cost}, err
	} else if ci >= 0 {
		// the concurrency script: no token lease (a slot is taken per
		// request), the deny cache still proves a bucket's denial
		sk, err := l.keys.Slots(req.Tenant.ID, buckets[ci].Name)
		if err != nil {
			return Decision{Reason: ReasonInvalid, Cost: req.Cost}, err
		}
		c.Slot = stack.Slot{Index: ci, Key: sk}
	}
	r, err := l.path.top.Decide(ctx, c)
	return l.answer(&req, &c, r), err
}

// tieredResolver is a resolver that also says why an answer is the tier
// defaults in place of overrides not loaded in time, waiting for a first
// override lookup no longer than it is told (quota.TieredResolver's
// BucketsWithin).
type tieredResolver interface {
	BucketsWithin(ctx context.Context, t quota.Tenant, class string, wait time.Duration) ([]quota.Bucket, string, error)
}

// buckets returns the buckets of req's i-th class (Class, then Also's):
// the caller's (Request.Resolved), or else the resolver's, counting an
// answer of tier defaults given in place of overrides not loaded in time
// (tollgate.overrides.late).
func (l *Limiter) buckets(ctx context.Context, req Request, i int) ([]quota.Bucket, error) {
	if req.Resolved != nil && req.Resolved[i] != nil {
		return req.Resolved[i], nil
	}
	class := req.Class
	if i > 0 {
		class = req.Also[i-1]
	}
	bs, late, err := l.resolve(ctx, req.Tenant, class)
	if late != "" {
		l.metrics.overridesLate(ctx, req.Tenant.Tier, class, late)
	}
	return bs, err
}

// resolve asks the resolver for the buckets of tenant t in class; a
// tiered resolver's first override lookup waits no longer than a check.
func (l *Limiter) resolve(ctx context.Context, t quota.Tenant, class string) (bs []quota.Bucket, late string, err error) {
	if l.quotas.tiered == nil {
		bs, err = l.quotas.resolver.Buckets(ctx, t, class)
		return bs, "", err
	}
	return l.quotas.tiered.BucketsWithin(ctx, t, class, l.cfg.timeout)
}

func (l *Limiter) validate(req Request) error {
	if err := keys.ValidateTenantID(req.Tenant.ID); err != nil {
		return err
	}
	if err := quota.ValidateName(req.Class); err != nil {
		return err
	}
	if req.Cost < 0 || req.Cost > quota.MaxCost {
		return fmt.Errorf("%w: cost must be 0 to %d, got %d", ErrInvalidRequest, int64(quota.MaxCost), req.Cost)
	}
	if len(req.Also) >= maxClasses {
		return fmt.Errorf("%w: %d classes in one request, more than %d", ErrInvalidRequest, 1+len(req.Also), maxClasses)
	}
	for _, class := range req.Also {
		if err := quota.ValidateName(class); err != nil {
			return err
		}
	}
	if req.Resolved != nil && len(req.Resolved) != 1+len(req.Also) {
		return fmt.Errorf("%w: %d bucket lists in Resolved for %d classes", ErrInvalidRequest, len(req.Resolved), 1+len(req.Also))
	}
	if req.AlsoCosts != nil && len(req.AlsoCosts) != len(req.Also) {
		return fmt.Errorf("%w: %d costs in AlsoCosts for %d classes in Also", ErrInvalidRequest, len(req.AlsoCosts), len(req.Also))
	}
	for i, c := range req.AlsoCosts {
		if c < 0 || c > quota.MaxCost {
			return fmt.Errorf("%w: cost of class %q must be 0 to %d, got %d", ErrInvalidRequest, req.Also[i], int64(quota.MaxCost), c)
		}
	}
	return nil
}

func orDefault(class string) string {
	if class == "" {
		return quota.DefaultClass
	}
	return class
}

// concurrentBucket returns the index of the bucket with a concurrency
// limit, or -1; two are a configuration mistake.
func concurrentBucket(buckets []quota.Bucket) (int, error) {
	ci := -1
	for i, b := range buckets {
		if b.Quota.Concurrency > 0 {
			if ci >= 0 {
				return -1, fmt.Errorf("%w: buckets %q and %q both have a concurrency limit; a request may have one", quota.ErrInvalid, buckets[ci].Name, b.Name)
			}
			ci = i
		}
	}
	return ci, nil
}

// validateBuckets reports the first thing wrong with a resolver's answer:
// no bucket, a bad name or quota, a name twice.
func validateBuckets(bs []quota.Bucket) error {
	if len(bs) == 0 {
		return fmt.Errorf("%w: resolver returned no buckets", ErrResolve)
	}
	for i, b := range bs {
		if err := quota.ValidateName(b.Name); err != nil {
			return fmt.Errorf("%w: bucket %d: %v", ErrResolve, i, err)
		}
		if err := b.Quota.Validate(); err != nil {
			return fmt.Errorf("bucket %q: %w", b.Name, err)
		}
		for _, o := range bs[:i] {
			if o.Name == b.Name {
				return fmt.Errorf("%w: bucket %q appears twice", ErrResolve, b.Name)
			}
		}
	}
	return nil
}
