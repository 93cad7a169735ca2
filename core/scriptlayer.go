package core

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// scriptLayer is the bottom of the check path: it charges c.cost tokens
// (req.Cost, or a lease's size) by one script call, batched or direct, and
// decodes the reply. It notes in c.wrote when the command was handed to the
// connection (wrote: zero when it never was), for the breaker above it. A
// failed call's error says what failed (see transport.StoreError); the layer above
// answers it.
//
// c.slot, when not nil, is the bucket with a concurrency limit: the call is
// the concurrency script's, and an admission takes a slot (Decision.Slot).
type scriptLayer struct{ l *Limiter }

func (s *scriptLayer) call(ctx context.Context, c *checkCall) (d Decision, wrote time.Time, err error) {
	l, req, keys, buckets, cost := s.l, c.req, c.keys, c.buckets, c.cost
	now := ""
	if l.cfg.clock != nil {
		now = strconv.FormatInt(c.sent.UnixMicro(), 10)
	}
	var one [1][3]any
	quotas := one[:0]
	for _, b := range buckets {
		quotas = append(quotas, l.quotaArgs(b.Quota))
	}
	var reply any
	if c.costs != nil {
		// a mixed-cost call: each bucket's cost is in c.costs (the Decision
		// states the binding bucket's); cost is only the request's own
		cost = req.Cost
	}
	if c.slot == nil {
		args := tokenBucket.Args(keys, now, cost, c.costs, quotas)
		reply, wrote, err = l.run(ctx, req.Tenant.ID, *args)
		if err == nil {
			// answered: neither go-redis nor a batch holds the line any more (a
			// caller that gave up leaves it to the batch still holding it)
			transport.PutArgs(args)
			if d, err = parseReply(reply, buckets, cost, c.costs); err != nil {
				err = &transport.RequestError{Err: err}
			}
		}
	} else {
		reply, wrote, err = l.run(ctx, req.Tenant.ID, l.slotLine(keys, buckets, now, cost, c.costs, quotas, c.slot))
		if err == nil {
			if d, err = l.parseSlotReply(reply, buckets, cost, c.costs, c.slot.index); err != nil {
				err = &transport.RequestError{Err: err}
			}
		}
		if err != nil && takes(cost, c.costs) && !neverRun(err) {
			// the store may run it, or have run it: whatever the caller is
			// answered, it holds no slot
			l.forgetSlot(req, buckets[c.slot.index], c.slot)
		}
	}
	if err != nil {
		return Decision{}, wrote, err
	}
	d.mixedCosts = c.costs != nil
	if c.slot != nil && d.Reason == ReasonOK && takes(cost, c.costs) {
		d.Slot = l.newSlot(req, buckets[c.slot.index], c.slot.key, c.slot.id, c.sent)
	}
	return d, wrote, nil
}

// quotaArgs returns a quota's script arguments (capacity, rate, TTL),
// formatted once per quota: quotas are few, checks many.
func (l *Limiter) quotaArgs(q quota.Quota) [3]any {
	if v, ok := l.quotas.args.Load(q); ok {
		return v.([3]any)
	}
	a := [3]any{strconv.FormatInt(q.Capacity, 10), strconv.FormatFloat(q.RefillPerSecond, 'f', -1, 64), ttlMillis(q)}
	if l.quotas.nargs.Load() < maxCachedSets {
		if _, loaded := l.quotas.args.LoadOrStore(q, a); !loaded {
			l.quotas.nargs.Add(1)
		}
	}
	return a
}

// run calls the script once, through the transport (batched or direct),
// and names a failure for what it was (see transport.StoreError). The store timeout bounds the call from when its command is
// handed to the connection; the caller's own deadline, when earlier, bounds
// it too. wrote is when the command was handed over (zero when it never
// was).
func (l *Limiter) run(ctx context.Context, tenant string, args []any) (v any, wrote time.Time, err error) {
	v, wrote, err = l.store.calls.Do(ctx, tenant, args)
	if err != nil {
		err = transport.StoreError(ctx, l.cfg.timeout, err)
	}
	return v, wrote, err
}

// takes reports whether a check of the concurrency script takes a slot
// when admitted: any cost above 0 (all 0 is a peek).
func takes(cost int64, costs []int64) bool {
	return cost > 0 || slices.ContainsFunc(costs, func(k int64) bool { return k > 0 })
}
