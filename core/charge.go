package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// storeLayer is the bottom of the check path: the store shard's circuit
// breaker and the local fallback, the batcher or a direct call, the script.
type storeLayer struct{ l *Limiter }

func (s *storeLayer) decide(ctx context.Context, c *checkCall) (Decision, error) {
	return s.l.charge(ctx, c.req, c.keys, c.buckets, c.cost, c.sent, c.slot)
}

// charge charges cost tokens (req.Cost, or a lease's size) in the store, or
// answers without it when the call fails (see failed). sent is when the
// check started, on the limiter's clock.
//
// slot, when not nil, is the bucket with a concurrency limit: the call is
// the concurrency script's, and an admission takes a slot (Decision.Slot).
func (l *Limiter) charge(ctx context.Context, req Request, keys []string, buckets []Bucket, cost int64, sent time.Time, slot *slotCall) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return l.callerGone(req, err)
	}
	sh := l.shards.ForKey(ctx, keys[0])
	ok, probe := sh.Allow(sent)
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
	var reply any
	var wrote time.Time
	var err error
	var d Decision
	if slot == nil {
		args := tokenBucket.Args(keys, now, cost, quotas)
		reply, wrote, err = l.run(ctx, req.Tenant.ID, *args)
		if err == nil {
			// answered: neither go-redis nor a batch holds the line any more (a
			// caller that gave up leaves it to the batch still holding it)
			transport.PutArgs(args)
			if d, err = parseReply(reply, buckets, cost); err != nil {
				err = &requestError{err}
			}
		}
	} else {
		reply, wrote, err = l.run(ctx, req.Tenant.ID, l.slotLine(keys, buckets, now, cost, quotas, slot))
		if err == nil {
			if d, err = l.parseSlotReply(reply, buckets, cost, slot.index); err != nil {
				err = &requestError{err}
			}
		}
	}
	if err != nil {
		return l.failed(ctx, req, keys, buckets, err, sh, start, wrote, probe)
	}
	sh.Success(wrote)
	l.metrics.storeCall(ctx, time.Since(start), nil, l.cfg.policy)
	if l.fallback != nil {
		l.fallback.forget(keys) // the store answers this tenant again
	}
	if slot != nil && d.Reason == ReasonOK && cost > 0 {
		d.Slot = l.newSlot(req, buckets[slot.index], slot.key, slot.id, sent)
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

// run calls the script once, through the transport (batched or direct),
// and names a failure for what it was (see storeError). The store timeout bounds the call from when its command is
// handed to the connection; the caller's own deadline, when earlier, bounds
// it too. wrote is when the command was handed over (zero when it never
// was).
func (l *Limiter) run(ctx context.Context, tenant string, args []any) (v any, wrote time.Time, err error) {
	v, wrote, err = l.calls.Do(ctx, tenant, args)
	if err != nil {
		err = storeError(ctx, l.cfg.timeout, err)
	}
	return v, wrote, err
}
