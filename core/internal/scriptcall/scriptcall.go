// Package scriptcall is the bottom of the check path: one script call per
// check, through the transport (batched or direct), and the decoding of
// its reply into the call's result. A call with a concurrency slot is the
// concurrency script's; every other, the token-bucket script's.
package scriptcall

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The check path's scripts: the token bucket's, and the concurrency
// script's, which only checks of a bucket set with a concurrency limit
// send (it also renews, frees and forgets slots).
var (
	TokenBucket = transport.NewScript(lua.TokenBucket())
	Concurrency = transport.NewScript(lua.Concurrency())
)

// Layer makes the script call of a check: it charges Call.Charge tokens
// (the request's cost, or a lease's size; each bucket its own of
// Call.Costs when set) and decodes the reply. The result notes when the
// command was handed to the connection (Wrote), for the breaker above it.
// A failed call's error says what failed (see transport.StoreError); a
// layer above answers it.
type Layer struct {
	calls   transport.Caller
	timeout time.Duration
	// clock: the script's clock is the limiter's (WithClock), sent as the
	// call's Sent; else the server's
	clock bool
	args  *QuotaArgs
	// slot is the concurrency script's lease and key TTL arguments
	slotLease, slotTTL string
}

// New returns the bottom layer: calls through calls, each bounded by
// timeout; clock: send the call's Sent as the script's now; slotLease is
// the lease of a concurrency slot.
func New(calls transport.Caller, timeout time.Duration, clock bool, args *QuotaArgs, slotLease time.Duration) *Layer {
	lease, ttl := SlotArgs(slotLease)
	return &Layer{calls: calls, timeout: timeout, clock: clock, args: args, slotLease: lease, slotTTL: ttl}
}

// SlotArgs formats a slot lease for the concurrency script: its length in
// microseconds and the slot set's key TTL in milliseconds (the lease
// rounded up, plus a second).
func SlotArgs(lease time.Duration) (micros, ttl string) {
	ms := (lease + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(lease.Microseconds(), 10), strconv.FormatInt(int64(ms)+1000, 10)
}

// Decide makes c's script call.
func (s *Layer) Decide(ctx context.Context, c stack.Call) (stack.Result, error) {
	cost := c.Charge
	now := ""
	if s.clock {
		now = strconv.FormatInt(c.Sent.UnixMicro(), 10)
	}
	var one [1][3]any
	quotas := one[:0]
	for _, b := range c.Buckets {
		quotas = append(quotas, s.args.Of(b.Quota))
	}
	if c.Costs != nil {
		// a mixed-cost call: each bucket's cost is in c.Costs (the result
		// states the binding bucket's); cost is only the request's own
		cost = c.Cost
	}
	var r stack.Result
	var reply any
	var wrote time.Time
	var err error
	if c.Slot.Key == "" {
		args := TokenBucket.Args(c.Keys, now, cost, c.Costs, quotas)
		reply, wrote, err = s.run(ctx, c.Tenant.ID, *args)
		if err == nil {
			// answered: neither go-redis nor a batch holds the line any more (a
			// caller that gave up leaves it to the batch still holding it)
			transport.PutArgs(args)
			if r, err = parseReply(reply, c.Buckets, cost, c.Costs); err != nil {
				err = &transport.RequestError{Err: err}
			}
		}
	} else {
		reply, wrote, err = s.run(ctx, c.Tenant.ID, s.slotLine(c.Keys, c.Buckets, now, cost, c.Costs, quotas, c.Slot))
		if err == nil {
			if r, err = parseSlotReply(reply, c.Buckets, cost, c.Costs, c.Slot.Index); err != nil {
				err = &transport.RequestError{Err: err}
			}
		}
	}
	if err != nil {
		return stack.Result{Wrote: wrote}, err
	}
	r.Wrote = wrote
	return r, nil
}

// run calls the script once, through the transport (batched or direct),
// and names a failure for what it was (see transport.StoreError). The
// store timeout bounds the call from when its command is handed to the
// connection; the caller's own deadline, when earlier, bounds it too.
// wrote is when the command was handed over (zero when it never was).
func (s *Layer) run(ctx context.Context, tenant string, args []any) (v any, wrote time.Time, err error) {
	v, wrote, err = s.calls.Do(ctx, tenant, args)
	if err != nil {
		err = transport.StoreError(ctx, s.timeout, err)
	}
	return v, wrote, err
}

// slotLine is the concurrency script's command line for a check. costs,
// when not nil, is each bucket's cost: the cost argument is "" and each
// bucket's group carries its own (see the script's header).
func (s *Layer) slotLine(keys []string, buckets []quota.Bucket, now string, cost int64, costs []int64, quotas [][3]any, slot stack.Slot) []any {
	all := make([]string, 0, len(keys)+1)
	all = append(append(all, keys...), slot.Key)
	args := make([]any, 0, 2+4*len(quotas)+4)
	if costs == nil {
		args = append(args, now, strconv.FormatInt(cost, 10))
		for _, q := range quotas {
			args = append(args, q[0], q[1], q[2])
		}
	} else {
		args = append(args, now, "")
		for i, q := range quotas {
			args = append(args, q[0], q[1], q[2], strconv.FormatInt(costs[i], 10))
		}
	}
	args = append(args, strconv.FormatInt(buckets[slot.Index].Quota.Concurrency, 10), s.slotLease, slot.ID, s.slotTTL)
	return Concurrency.Line(all, args...)
}

// QuotaArgs is each quota's script arguments (capacity, rate, TTL),
// formatted once per quota: quotas are few, checks many. It holds at most
// maxArgs quotas; past that, arguments are formatted per call.
type QuotaArgs struct {
	m sync.Map // Quota -> [3]any
	n atomic.Int64
}

// maxArgs bounds the quotas whose arguments are kept.
const maxArgs = 4096

// Of returns q's script arguments.
func (a *QuotaArgs) Of(q quota.Quota) [3]any {
	if v, ok := a.m.Load(q); ok {
		return v.([3]any)
	}
	v := [3]any{strconv.FormatInt(q.Capacity, 10), strconv.FormatFloat(q.RefillPerSecond, 'f', -1, 64), ttlMillis(q)}
	if a.n.Load() < maxArgs {
		if _, loaded := a.m.LoadOrStore(q, v); !loaded {
			a.n.Add(1)
		}
	}
	return v
}

// ttlMillis is the key TTL of a bucket of quota q: the time an empty bucket
// takes to refill, plus a second of margin. An idle bucket is full by then,
// so its expiry loses nothing. Always a positive integer, formatted here
// rather than by the server.
func ttlMillis(q quota.Quota) string {
	ms := math.Ceil(float64(q.Capacity)/q.RefillPerSecond*1000) + 1000
	return strconv.FormatInt(int64(ms), 10)
}
