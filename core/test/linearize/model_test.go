package linearize_test

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// kind is what an operation's answer says about the store.
type kind uint8

const (
	// admitted by the store: the reply is the bucket's state (tokens, stamp)
	admitted kind = iota
	// denied by the store: the reply is the balance at an unknown time of
	// the call, nothing charged
	denied
	// denied by the deny cache without a store call: the bucket must have
	// held fewer tokens than the cost at some time of the call
	localDenied
	// degraded after its command may have been sent (timeout, reset, lost
	// reply, late reply): it charged the cost once or not at all, at a
	// time between its invocation and its (extended) return
	ambiguous
	// admitted from this replica's lease, without a store call: checked
	// against the lease bound (leaseBound), not the model
	leased
)

var kindNames = [...]string{"admitted", "denied", "local-denied", "ambiguous", "leased"}

// input is one operation as the model sees it. lo and hi bound the time,
// in microseconds of the clock the script used (the server's, or the
// replica's own in client-clock mode), at which the store could have run it.
type input struct {
	kind   kind
	cost   int64
	lo, hi int64
	// lease is the lease size when leases are on: a store admission then
	// either charged the cost (a plain check) or took a lease (charged
	// lease, and the decision's balance counts the lease's lease-cost
	// unspent tokens); an ambiguous call charged nothing, cost or lease
	lease int64
	// lag is how far, in µs, the replica's clock was behind the others'
	// (client-clock mode): its deny cache may deny lag × rate tokens the
	// store still holds (see WithDenyCache)
	lag int64
}

// output is the store's answer: the balance, and for an admission the stamp
// of the state written.
type output struct {
	tokens float64
	stamp  int64
}

// bucket is the model's state: the balance tok at the stamp last, as the
// last admission left it, less debt: the costs of ambiguous operations
// the search chose to let run since, at unknown times. debt 0 is exact.
type bucket struct {
	tok  float64
	last int64
	debt int64
	// approx marks a balance known only to within eps
	approx bool
	// pend is the latest stamp an ambiguous call counted in debt may have
	// written (the end of its window, in its replica's clock)
	pend int64
}

// quota is the bucket's configuration, known to the model.
type quota struct {
	capacity float64
	rate     float64 // tokens per second
}

// eps absorbs float rounding in the interval checks (a debt makes the
// state an interval); exact states are compared exactly.
const eps = 1e-9

// refill is the script's lazy refill from last to now, in its arithmetic.
func (q quota) refill(tok float64, last, now int64) float64 {
	if now > last {
		tok += float64(now-last) * q.rate / 1000000
		if tok > q.capacity {
			tok = q.capacity
		}
	}
	return tok
}

// bounds is the interval the balance lies in at now (>= last): exact
// without debt; with debt D, at least the refilled balance less D (a charge
// never lowers the balance by more than its cost) and at most the
// uncapped refill less D, and the capacity.
func (q quota) bounds(b bucket, now int64) (lo, hi float64) {
	full := q.refill(b.tok, b.last, now)
	if b.debt == 0 {
		return full, full
	}
	d := float64(b.debt)
	hi = b.tok - d
	if now > b.last {
		hi += float64(now-b.last) * q.rate / 1000000
	}
	return math.Max(0, full-d), math.Min(q.capacity, hi)
}

// step is the model: the states that b can be in after the operation, none
// when the answer is impossible.
func (q quota) step(b bucket, in input, out output) []bucket {
	switch in.kind {
	case admitted:
		s := out.stamp
		// the stored stamp never moves backwards; a newer one is the
		// clock's reading during the call, or, after an ambiguous call
		// (debt), possibly the stamp that call wrote: in client-clock mode
		// another replica's clock may be ahead of this one's
		if s < b.last || (s > b.last && (s < in.lo || s > in.hi) && (b.debt == 0 || s > b.pend)) {
			return nil
		}
		var next []bucket
		if q.charged(b, s, in.cost, out.tokens, b.debt == 0 && !b.approx) {
			next = append(next, bucket{tok: out.tokens, last: s})
		}
		if in.lease > in.cost {
			// a lease: the decision's balance is the store's plus the
			// lease's unspent tokens, a sum not exact in floating point;
			// from an exact state the store's balance is known exactly
			unspent := float64(in.lease - in.cost)
			if b.debt == 0 && !b.approx {
				lo, _ := q.bounds(b, s)
				if stored := lo - float64(in.lease); math.Abs(stored+unspent-out.tokens) <= eps {
					next = append(next, bucket{tok: stored, last: s})
				}
			} else if tok := out.tokens - unspent; q.charged(b, s, in.lease, tok, false) {
				// an interval state: approximately, so the next check of
				// this state is by interval too
				next = append(next, bucket{tok: tok, last: s, approx: true})
			}
		}
		return next
	case denied, localDenied:
		// the clock read during the call was in [lo, hi], or behind the
		// stored stamp: last, or one an ambiguous call wrote
		from, to := max(b.last, in.lo), max(b.last, in.hi)
		if b.debt > 0 {
			to = max(to, b.pend)
		}
		lo, _ := q.bounds(b, from)
		_, hi := q.bounds(b, to)
		if in.kind == localDenied {
			if lo-float64(in.lag)*q.rate/1000000 >= float64(in.cost) {
				return nil
			}
			return []bucket{b}
		}
		if out.tokens >= float64(in.cost) || out.tokens < lo-eps || out.tokens > hi+eps {
			return nil
		}
		return []bucket{b}
	default:
		// ran once, or not at all
		ran := b
		ran.debt += in.cost
		ran.pend = max(b.pend, in.hi)
		next := []bucket{b, ran}
		if in.lease > in.cost {
			ran.debt += in.lease - in.cost
			next = append(next, ran)
		}
		return next
	}
}

// charged reports whether a charge of cost at the stamp s, from b, can
// leave tokens: exactly the script's arithmetic when exact, else within
// the state's interval.
func (q quota) charged(b bucket, s, cost int64, tokens float64, exact bool) bool {
	lo, hi := q.bounds(b, s)
	if exact {
		return lo-float64(cost) == tokens
	}
	got := tokens + float64(cost)
	return got >= lo-eps && got <= hi+eps
}

// op is one recorded operation.
type op struct {
	Replica   int     `json:"r"`
	Client    int     `json:"c"`
	Key       string  `json:"k"`
	Kind      kind    `json:"kind"`
	Cost      int64   `json:"cost"`
	Call      int64   `json:"call"` // wall clock, ns
	Return    int64   `json:"ret"`
	Tokens    float64 `json:"tok"`
	Stamp     int64   `json:"stamp"`  // µs, admissions only
	OffLo     int64   `json:"offlo"`  // the replica's clock offset, µs: least and
	OffHi     int64   `json:"offhi"`  // greatest during the call
	Reason    string  `json:"reason"` // the decision's reason (degraded ones)
	Allowed   bool    `json:"allowed"`
	Fallback  bool    `json:"fallback"`
	NotSent   bool    `json:"notsent"` // degraded without a store call
	Lease     int64   `json:"lease"`   // the lease size, when leases are on
	Extension int64   `json:"ext"`     // ns added to an ambiguous call's return
}

// slack widens each call's window, in µs: the process's clock reading and
// the server's are the same clock, each truncated to the microsecond.
const slack = 2

// model is the porcupine model over a history of ops, partitioned by key.
func model(q quota) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, o := range h {
				k := o.Metadata.(string)
				if byKey[k] == nil {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{bucket{tok: q.capacity}} },
		Step: func(state, in, out interface{}) []interface{} {
			next := q.step(state.(bucket), in.(input), out.(output))
			res := make([]interface{}, len(next))
			for i, b := range next {
				res[i] = b
			}
			return res
		},
		Equal: func(a, b interface{}) bool { return a.(bucket) == b.(bucket) },
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(input), out.(output)
			return fmt.Sprintf("%s cost %d [%d,%d] -> %.17g @%d", kindNames[i.kind], i.cost, i.lo, i.hi, o.tokens, o.stamp)
		},
		DescribeState: func(s interface{}) string {
			b := s.(bucket)
			return fmt.Sprintf("%.17g @%d debt %d", b.tok, b.last, b.debt)
		},
	}
	return nm.ToModel()
}

// operations turns recorded ops into porcupine's history: degraded ops
// without a store call are left out (they touch no bucket).
func operations(ops []op) []porcupine.Operation {
	h := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		if o.NotSent || o.Kind == leased {
			continue
		}
		ret := o.Return + o.Extension
		// the other replicas' clocks are never stepped: a negative
		// offset is this replica's lag behind them
		in := input{kind: o.Kind, cost: o.Cost, lease: o.Lease, lag: max(0, -o.OffLo),
			lo: o.Call/1000 + o.OffLo - slack, hi: ret/1000 + o.OffHi + slack}
		h = append(h, porcupine.Operation{ClientId: o.Replica*1000 + o.Client, Input: in, Call: o.Call,
			Output: output{tokens: o.Tokens, stamp: o.Stamp}, Return: ret, Metadata: o.Key})
	}
	return h
}
