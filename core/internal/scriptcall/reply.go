package scriptcall

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// errProtocol marks a reply the limiter cannot decode.
var errProtocol = transport.ErrProtocol

// parseReply decodes the script's reply (see the script's header), checking
// every element's type, and works out what the script leaves to the caller:
// "cost exceeds capacity" and the retry time.
// costs, when not nil, is each bucket's cost (a mixed-cost call); cost is
// still the request's, which the result states.
func parseReply(v any, buckets []quota.Bucket, cost int64, costs []int64) (stack.Result, error) {
	if s, ok := v.(string); ok && len(buckets) == 1 {
		// one bucket: the state after an admission, or the balance after a
		// denial (no space)
		tok, stamp, err := parseTokens(s)
		if err != nil {
			return stack.Result{}, err
		}
		reason := int64(0)
		if strings.IndexByte(s, ' ') < 0 {
			reason = 1
		}
		toks, stamps := [1]float64{tok}, [1]int64{stamp}
		return decide(buckets, toks[:], stamps[:], 0, reason, cost, costs), nil
	}
	a, ok := v.([]any)
	if !ok || len(buckets) < 2 || len(a) != 3+len(buckets) {
		return stack.Result{}, fmt.Errorf("%w: script reply %T of length %d", errProtocol, v, len(a))
	}
	allowed, ok1 := a[0].(int64)
	reason, ok2 := a[1].(int64)
	binding, ok3 := a[2].(int64)
	if !ok1 || !ok2 || !ok3 || binding < 1 || int(binding) > len(buckets) || reason < 0 || reason > 2 || (allowed == 1) != (reason == 0) {
		return stack.Result{}, fmt.Errorf("%w: script reply header %v", errProtocol, a[:3])
	}
	toks, stamps, err := parseBalances(a[3:])
	if err != nil {
		return stack.Result{}, err
	}
	return decide(buckets, toks, stamps, int(binding-1), reason, cost, costs), nil
}

// decide builds the result from the buckets' balances after the call, the
// binding bucket and the script's reason (0 admitted, else denied; a denial
// by a bucket whose capacity is below the cost is "cost exceeds capacity").
// stamps holds each state's stamp in microseconds, -1 where the reply had
// none. costs, when not nil, is each bucket's own cost: the binding
// bucket's is the one judged.
func decide(buckets []quota.Bucket, toks []float64, stamps []int64, binding int, reason, cost int64, costs []int64) stack.Result {
	states := make([]stack.Bucket, len(buckets))
	for i, b := range buckets {
		states[i] = stack.Bucket{Name: b.Name, Quota: b.Quota, Tokens: toks[i]}
		if stamps[i] >= 0 {
			states[i].Stamp = time.UnixMicro(stamps[i])
		}
	}
	// the result states the binding bucket's cost: for a mixed-cost call
	// its own, so that a denial's "costs N" and its wait are of one bucket
	r := stack.Result{Verdict: stack.OK, Buckets: states, Binding: binding, Cost: cost}
	if costs != nil {
		r.Cost = costs[binding]
	}
	if reason != 0 {
		b := buckets[binding].Quota
		if r.Cost > b.Capacity {
			r.Verdict = stack.CostExceedsCapacity
		} else {
			r.Verdict, r.Retry = stack.OverLimit, bucketmath.Duration(bucketmath.WaitFor(b.RefillPerSecond, toks[binding], r.Cost))
		}
	}
	return r
}

// parseBalances reads the buckets' balances at the end of a script's
// reply, one string each (see parseTokens).
func parseBalances(a []any) (toks []float64, stamps []int64, err error) {
	toks, stamps = make([]float64, len(a)), make([]int64, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			return nil, nil, fmt.Errorf("%w: script reply element %T, want a string", errProtocol, e)
		}
		if toks[i], stamps[i], err = parseTokens(s); err != nil {
			return nil, nil, err
		}
	}
	return toks, stamps, nil
}

// parseTokens reads a bucket's balance: a number, possibly followed by a
// space and the state's stamp in integer microseconds (the stored state,
// which the script replies as is). The stamp is -1 when there is none, or
// when it is not an integer (a stored stamp the script accepted in another
// form, kept because it lies in the future): the balance alone decides.
func parseTokens(s string) (float64, int64, error) {
	stamp := int64(-1)
	if i := strings.IndexByte(s, ' '); i >= 0 {
		if st, err := strconv.ParseInt(s[i+1:], 10, 64); err == nil && st >= 0 {
			stamp = st
		}
		s = s[:i]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: script reply element %q: %w", errProtocol, s, err)
	}
	return f, stamp, nil
}

// parseSlotReply decodes the concurrency script's reply (see its header).
// A denial for want of a slot waits, as the reply says, until the earliest
// slot's deadline.
func parseSlotReply(v any, buckets []quota.Bucket, cost int64, costs []int64, ci int) (stack.Result, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5+len(buckets) {
		return stack.Result{}, fmt.Errorf("%w: concurrency script reply %T of length %d", errProtocol, v, len(a))
	}
	allowed, ok1 := a[0].(int64)
	reason, ok2 := a[1].(int64)
	binding, ok3 := a[2].(int64)
	held, ok4 := a[3].(int64)
	wait, ok5 := a[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || binding < 1 || int(binding) > len(buckets) || reason < 0 || reason > 3 ||
		(allowed == 1) != (reason == 0) || held < 0 || wait < 0 {
		return stack.Result{}, fmt.Errorf("%w: concurrency script reply header %v", errProtocol, a[:5])
	}
	toks, stamps, err := parseBalances(a[5:])
	if err != nil {
		return stack.Result{}, err
	}
	if reason != 3 {
		r := decide(buckets, toks, stamps, int(binding-1), reason, cost, costs)
		r.Buckets[ci].InFlight = held
		return r, nil
	}
	states := stack.Balances(buckets, toks)
	states[ci].InFlight = held
	return stack.Result{Verdict: stack.ConcurrencyLimit, Buckets: states, Binding: ci, Cost: cost,
		Retry: time.Duration(wait) * time.Microsecond}, nil
}
