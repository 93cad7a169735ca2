package linearize_test

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// kind is what an operation's answer says about the store.
type kind uint8

const (
	// admitted by the store: the reply is each bucket's state (tokens,
	// stamp), and the slot count when the check takes a slot
	admitted kind = iota
	// denied by the store: the reply is each bucket's balance at an
	// unknown time of the call, nothing charged; some bucket lacked its
	// cost
	denied
	// denied by the deny cache without a store call: the bucket must have
	// held fewer tokens than the cost at some time of the call
	localDenied
	// degraded after its command may have been sent (timeout, reset, lost
	// reply, late reply): it charged the cost once or not at all, at a
	// time between its invocation and its (extended) return; a check that
	// takes a slot may have taken one, held by nobody
	ambiguous
	// admitted from this replica's lease, without a store call: checked
	// against the lease bound (leaseBound), not the model
	leased
	// denied for lack of a concurrency slot: every bucket held its cost,
	// and the reply is the slots in use, at least the limit
	slotDenied
	// a settle the store answered: each bucket of the reservation was
	// charged delta (a refund when negative) less what it forgave, at an
	// unknown time of the call
	settled
	// a settle whose command may have been sent and whose answer was lost:
	// charged at most delta (refunded at most -delta) once, or not at all
	settleFailed
	// a slot released: its holder no longer holds it, and the store frees
	// it at some time from the release's invocation on (the release is
	// retried in the background, or the slot expires)
	released
	// reserved by the store (Limiter.Reserve): every bucket the request
	// names was charged its cost at the stamp, its balance possibly below
	// zero but by no more than the refill of the max wait; the reply is
	// each bucket's state, as an admission's
	reserved
	// a reservation refused by the store: nothing charged; the reply is
	// each bucket's balance at an unknown time of the call, and some
	// bucket's wait for its cost exceeded the max wait
	reserveDenied
	// a reservation whose command may have been sent and whose answer was
	// lost: it charged each bucket its cost once, possibly below zero, or
	// nothing
	reserveFailed
	// a reservation cancelled (Reservation.Cancel): each bucket the
	// request names got back some of its cost, 0 to all of it (what later
	// reservations allow, which the model does not follow), at an unknown
	// time of the call, or, the call failed, nothing
	cancelled
)

var kindNames = [...]string{"admitted", "denied", "local-denied", "ambiguous", "leased", "slot-denied", "settled", "settle-failed", "released",
	"reserved", "reserve-denied", "reserve-failed", "cancelled"}

// nb is the number of buckets of a tenant the model follows: the class a
// check names, and a second class a multi-bucket check names with it
// (Request.Also), charged all-or-nothing in one script call.
const nb = 2

// input is one operation as the model sees it. lo and hi bound the time,
// in microseconds of the clock the script used (the server's, or the
// replica's own in client-clock mode), at which the store could have run it.
type input struct {
	kind kind
	// costs is each bucket's cost, 0 for a bucket the request does not name
	costs  [nb]int64
	lo, hi int64
	// lease is the largest lease when leases are on: a store admission
	// then either charged the cost (a plain check) or took a lease of some
	// size from 2 to lease (charged it, and the decision's balance counts
	// the lease's size-cost unspent tokens); an ambiguous call charged
	// nothing, cost or a lease
	lease int64
	// lag is how far, in µs, the replica's clock was behind the others'
	// (client-clock mode): its deny cache may deny lag × rate tokens the
	// store still holds (see WithDenyCache)
	lag int64
	// slot: the check takes a concurrency slot of the tenant (bucket 0's
	// limit) when admitted
	slot bool
	// delta is a settle's actual - estimate; forgiven is what it reported
	// forgiven (the most over its buckets)
	delta, forgiven int64
	// maxWait is a reservation's max wait, µs
	maxWait int64
	// call and ret are the call's invocation and (extended) return, µs of
	// the wall clock every process shares
	call, ret int64
	// window: a deny-cache denial may be short only of what refunds that
	// returned after call - window gave back (see WithDenyCache); keep: no
	// operation linearized after this one can ignore a refund that
	// returned before call - keep
	window, keep int64
}

// output is the store's answer: each bucket's balance, and for an
// admission the stamp of the state written; held is the slots in use that
// a check of a concurrency-limited bucket reports (after an admission,
// counting its own).
type output struct {
	tokens [nb]float64
	stamps [nb]int64
	held   int64
}

// bucket is one bucket's state in the model: the balance tok at the stamp
// last, as the last admission left it, changed since by operations the
// search let run at unknown times: debt, the costs of ambiguous admissions
// (exact); settle charges whose sum lies in [owedLo, owedHi]; and refunds,
// at most refund. Nothing pending is exact.
type bucket struct {
	tok            float64
	last           int64
	debt           int64
	owedLo, owedHi float64
	refund         float64
	// given is what cancels gave back at most: each 0 to its cost
	given float64
	// approx marks a balance known only to within eps
	approx bool
	// pend is the latest stamp an operation counted as pending may have
	// written (the end of its window, in its replica's clock)
	pend int64
	// refunds are the refunds a deny-cache denial may not have seen yet:
	// each one's tokens and return, oldest first, unused ones zero
	refunds [4]refundMark
}

// refundMark is a refund of tok tokens whose settle returned at ret (µs,
// wall clock).
type refundMark struct {
	tok float64
	ret int64
}

// addRefund records a refund of tok returned at ret; when every mark is
// used, the two oldest merge into one of their sum at the later return (a
// deny-cache denial may then ignore both for longer: the model errs on
// accepting).
func (b *bucket) addRefund(tok float64, ret int64) {
	n := 0
	for n < len(b.refunds) && b.refunds[n].tok != 0 {
		n++
	}
	if n == len(b.refunds) {
		b.refunds[1] = refundMark{tok: b.refunds[0].tok + b.refunds[1].tok, ret: max(b.refunds[0].ret, b.refunds[1].ret)}
		copy(b.refunds[:], b.refunds[1:])
		n--
	}
	b.refunds[n] = refundMark{tok: tok, ret: ret}
	for i := n; i > 0 && b.refunds[i].ret < b.refunds[i-1].ret; i-- {
		b.refunds[i], b.refunds[i-1] = b.refunds[i-1], b.refunds[i]
	}
}

// pruneRefunds forgets the refunds that returned before cutoff: no
// deny-cache denial still to be linearized can ignore them.
func (b *bucket) pruneRefunds(cutoff int64) {
	n := 0
	for n < len(b.refunds) && b.refunds[n].tok != 0 && b.refunds[n].ret < cutoff {
		n++
	}
	if n > 0 {
		copy(b.refunds[:], b.refunds[n:])
		clear(b.refunds[len(b.refunds)-n:])
	}
}

// unseen is what the refunds that returned after since gave back, at most:
// a deny-cache denial sent within its window after them may be short of
// that much.
func (b bucket) unseen(since int64) float64 {
	sum := 0.0
	for _, m := range b.refunds {
		if m.tok != 0 && m.ret > since {
			sum += m.tok
		}
	}
	return sum
}

// pending reports whether operations at unknown times changed b.
func (b bucket) pending() bool {
	return b.debt != 0 || b.owedHi != 0 || b.refund != 0 || b.given != 0
}

// state is a tenant's state: its buckets, and its concurrency slots:
// holders is the slots held by requests admitted and not yet released;
// orphans bounds the slots held by nobody that the store may still count
// (taken by an ambiguous check, or released and not yet removed), each of
// which may be freed at any time.
type state struct {
	b                [nb]bucket
	holders, orphans int64
}

// quota is a bucket's configuration, known to the model.
type quota struct {
	capacity float64
	rate     float64 // tokens per second
}

// quotas is a tenant's: each bucket's, and the concurrency limit of bucket
// 0 (0: none).
type quotas struct {
	b     [nb]quota
	slots int64
	// denyAge is how long, in µs, a deny-cache entry is trusted: the check
	// timeout (see WithDenyCache); 0: no deny cache ignores a refund
	denyAge int64
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
// with nothing pending, or only refunds; else at least the refilled
// balance less the debt and the most the settles charged (a charge never
// lowers the balance by more than its cost, a refund never lowers it, and
// an admission never leaves it below zero), and at most the uncapped refill less the debt and
// the least the settles charged, plus the refunds, and the capacity.
func (q quota) bounds(b bucket, now int64) (lo, hi float64) {
	full := q.refill(b.tok, b.last, now)
	if !b.pending() {
		return full, full
	}
	d := float64(b.debt)
	hi = b.tok - d - b.owedLo + b.refund + b.given
	if now > b.last {
		hi += float64(now-b.last) * q.rate / 1000000
	}
	lo = full - d - b.owedHi
	switch {
	case d == 0 && b.owedHi == 0:
		// only refunds ran: additions capped at the capacity, as the
		// refill, so the balance is exactly the capped sum
		lo = math.Min(q.capacity, full+b.refund)
	case b.owedHi == 0:
		// only admissions ran: each left the balance at zero or more
		lo = math.Max(0, lo)
	}
	return lo, math.Min(q.capacity, hi)
}

// step is the model: the states that st can be in after the operation,
// none when the answer is impossible.
func (q quotas) step(st state, in input, out output) []state {
	if in.keep > 0 {
		for i := range nb {
			st.b[i].pruneRefunds(in.call - in.keep)
		}
	}
	switch in.kind {
	case admitted:
		return q.admit(st, in, out)
	case denied, localDenied, slotDenied:
		return q.deny(st, in, out)
	case settled, settleFailed:
		next := st
		for i := range nb {
			if in.costs[i] == 0 {
				continue
			}
			b := &next.b[i]
			d := float64(in.delta)
			switch {
			case in.delta < 0:
				// a refund: the balance rises by at most -delta (never
				// above the capacity), which another replica's deny cache
				// may not see for a while
				b.refund -= d
				b.addRefund(-d, in.ret)
			case in.kind == settled && in.forgiven == 0:
				b.owedLo += d
				b.owedHi += d
			case in.kind == settled:
				// this bucket forgave at most what the most forgiving one
				// did, and charged at most delta
				b.owedLo += max(0, d-float64(in.forgiven))
				b.owedHi += d
			default:
				// ran or not; if it ran, its forgiving is unknown
				b.owedHi += d
			}
			b.pend = max(b.pend, in.hi)
		}
		return []state{next}
	case reserved:
		return q.reserve(st, in, out)
	case reserveDenied:
		return q.reserveDeny(st, in, out)
	case cancelled:
		next := st
		for i := range nb {
			if c := float64(in.costs[i]); c > 0 {
				b := &next.b[i]
				b.given += c
				// a deny cache elsewhere may not see it for a while
				b.addRefund(c, in.ret)
				b.pend = max(b.pend, in.hi)
			}
		}
		return []state{next}
	case reserveFailed:
		// charged at most its cost once (a balance may go below zero by
		// it), or nothing: as a settle's charge whose answer was lost
		next := st
		for i := range nb {
			if in.costs[i] > 0 {
				next.b[i].owedHi += float64(in.costs[i])
				next.b[i].pend = max(next.b[i].pend, in.hi)
			}
		}
		return []state{next}
	case released:
		if st.holders == 0 {
			return nil
		}
		next := st
		next.holders--
		next.orphans++
		return []state{next}
	default:
		// ran once, or not at all
		ran := st
		for i := range nb {
			if in.costs[i] > 0 {
				ran.b[i].debt += in.costs[i]
				ran.b[i].pend = max(ran.b[i].pend, in.hi)
			}
		}
		if in.slot {
			// a slot taken by nobody may be freed at any time: one more
			// that may be held covers "not taken" too
			ran.orphans++
		}
		next := []state{st, ran}
		for size := max(2, in.costs[0]+1); size <= in.lease; size++ {
			leased := ran
			leased.b[0].debt += size - in.costs[0]
			next = append(next, leased)
		}
		return next
	}
}

// stampOK reports whether s can be the stamp an admission wrote to b: the
// stored stamp never moves backwards; a newer one is the clock's reading
// during the call, or, after an operation counted as pending, possibly
// the stamp that one wrote: in client-clock mode another replica's clock
// may be ahead of this one's.
func stampOK(b bucket, in input, s int64) bool {
	return s >= b.last && (s == b.last || (s >= in.lo && s <= in.hi) || (b.pending() && s <= b.pend))
}

// admit is an admission by the store: every bucket the request names held
// its cost at the stamp and was charged it, and a slot was free.
func (q quotas) admit(st state, in input, out output) []state {
	next := st
	for i := range nb {
		cost := in.costs[i]
		if cost == 0 {
			continue
		}
		b, s := st.b[i], out.stamps[i]
		if !stampOK(b, in, s) {
			return nil
		}
		if i == 0 && in.lease > cost {
			continue // below, with the lease
		}
		if !q.b[i].charged(b, s, cost, out.tokens[i], !b.pending() && !b.approx) {
			return nil
		}
		next.b[i] = bucket{tok: out.tokens[i], last: s, refunds: b.refunds}
	}
	if in.slot {
		// the slots in use before this one: every holder's, and some of
		// the orphans; below the limit
		before := out.held - 1
		if before < st.holders || before > st.holders+st.orphans || before >= q.slots {
			return nil
		}
		next.holders, next.orphans = st.holders+1, before-st.holders
	}
	if in.lease <= in.costs[0] {
		return []state{next}
	}
	// leases are taken by single-bucket checks only
	q0, b, s, tokens := q.b[0], st.b[0], out.stamps[0], out.tokens[0]
	var res []state
	if q0.charged(b, s, in.costs[0], tokens, !b.pending() && !b.approx) {
		// a plain charge
		next.b[0] = bucket{tok: tokens, last: s, refunds: b.refunds}
		res = append(res, next)
	}
	// a lease of any size from 2 to lease (sized by demand and the last
	// balance seen): the decision's balance is the store's plus the lease's
	// unspent tokens, a sum not exact in floating point; from an exact
	// state the store's balance is known exactly
	for size := max(2, in.costs[0]+1); size <= in.lease; size++ {
		unspent := float64(size - in.costs[0])
		if !b.pending() && !b.approx {
			lo, _ := q0.bounds(b, s)
			if stored := lo - float64(size); lo >= float64(size) && math.Abs(stored+unspent-tokens) <= eps {
				next.b[0] = bucket{tok: stored, last: s, refunds: b.refunds}
				res = append(res, next)
			}
		} else if tok := tokens - unspent; q0.charged(b, s, size, tok, false) {
			// an interval state: approximately, so the next check of this
			// state is by interval too
			next.b[0] = bucket{tok: tok, last: s, approx: true, refunds: b.refunds}
			res = append(res, next)
		}
	}
	return res
}

// wait is the reserve script's wait, in whole µs rounded up, for cost
// from a balance tok: 0 when tok holds it.
func (q quota) wait(tok float64, cost int64) float64 {
	if float64(cost) <= tok {
		return 0
	}
	return math.Ceil((float64(cost) - tok) / q.rate * 1000000)
}

// reserve is a reservation granted by the store: every bucket the request
// names was charged its cost at the stamp, whatever its balance, and
// waited at most the max wait for it.
func (q quotas) reserve(st state, in input, out output) []state {
	next := st
	for i := range nb {
		cost := in.costs[i]
		if cost == 0 {
			continue
		}
		b, s, qi := st.b[i], out.stamps[i], q.b[i]
		if !stampOK(b, in, s) {
			return nil
		}
		lo, hi := qi.bounds(b, s)
		tok := out.tokens[i]
		if !b.pending() && !b.approx {
			// exact: the script's arithmetic, and its wait
			if lo-float64(cost) != tok || qi.wait(lo, cost) > float64(in.maxWait) {
				return nil
			}
		} else {
			got := tok + float64(cost)
			if got < lo-eps || got > hi+eps || qi.wait(got+eps, cost) > float64(in.maxWait) {
				return nil
			}
		}
		next.b[i] = bucket{tok: tok, last: s, refunds: b.refunds}
	}
	return []state{next}
}

// reserveDeny is a reservation the store refused: each bucket's balance
// at one time of the call (as a denial's), and some bucket's wait above
// the max wait; nothing charged.
func (q quotas) reserveDeny(st state, in input, out output) []state {
	long := false
	for i := range nb {
		cost := in.costs[i]
		if cost == 0 {
			continue
		}
		b, qi := st.b[i], q.b[i]
		from, to := max(b.last, in.lo), max(b.last, in.hi)
		if b.pending() {
			to = max(to, b.pend)
		}
		lo, _ := qi.bounds(b, from)
		_, hi := qi.bounds(b, to)
		tok := out.tokens[i]
		if tok < lo-eps || tok > hi+eps {
			return nil
		}
		if qi.wait(tok, cost) > float64(in.maxWait) {
			long = true
		}
	}
	if !long {
		return nil
	}
	return []state{st}
}

// deny is a denial: by the store (each bucket's balance at one time of the
// call, some bucket short of its cost; or every bucket holding its cost
// and no slot free), or by the deny cache (the bucket short at some time).
func (q quotas) deny(st state, in input, out output) []state {
	short := false
	for i := range nb {
		cost := in.costs[i]
		if cost == 0 {
			continue
		}
		b, qi := st.b[i], q.b[i]
		// the clock read during the call was in [lo, hi], or behind the
		// stored stamp: last, or one a pending operation wrote
		from, to := max(b.last, in.lo), max(b.last, in.hi)
		if b.pending() {
			to = max(to, b.pend)
		}
		lo, _ := qi.bounds(b, from)
		_, hi := qi.bounds(b, to)
		if in.kind == localDenied {
			// one of the request's buckets was short at some time, but
			// for the refunds the cache may not have seen
			if lo-float64(in.lag)*qi.rate/1000000-b.unseen(in.call-in.window) < float64(cost) {
				short = true
			}
			continue
		}
		tok := out.tokens[i]
		if tok < lo-eps || tok > hi+eps {
			return nil
		}
		if tok < float64(cost) {
			short = true
		}
	}
	if in.kind == denied || in.kind == localDenied {
		if !short {
			return nil
		}
		return []state{st}
	}
	// slotDenied: every bucket held its cost, and every slot was in use
	if short || out.held < q.slots || out.held < st.holders || out.held > st.holders+st.orphans {
		return nil
	}
	next := st
	next.orphans = out.held - st.holders
	return []state{next}
}

// charged reports whether a charge of cost at the stamp s, from b, can
// leave tokens: the bucket held the cost (a balance below it is never
// charged), and the charge is exactly the script's arithmetic when b is
// exact, else within the state's interval.
func (q quota) charged(b bucket, s, cost int64, tokens float64, exact bool) bool {
	lo, hi := q.bounds(b, s)
	if exact {
		return lo >= float64(cost) && lo-float64(cost) == tokens
	}
	got := tokens + float64(cost)
	return got >= float64(cost)-eps && got >= lo-eps && got <= hi+eps
}

// op is one recorded operation.
type op struct {
	Replica   int     `json:"r"`
	Client    int     `json:"c"`
	Key       string  `json:"k"`
	Kind      kind    `json:"kind"`
	Cost      int64   `json:"cost"` // bucket 0's: the cost of the class checked
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
	// bucket 1's cost (0: not named), balance and stamp: a multi-bucket
	// check's second class
	AlsoCost   int64   `json:"acost,omitempty"`
	AlsoTokens float64 `json:"atok,omitempty"`
	AlsoStamp  int64   `json:"astamp,omitempty"`
	// Slot: a check of a concurrency-limited class; Held is the slots in
	// use it reported
	Slot bool  `json:"slot,omitempty"`
	Held int64 `json:"held,omitempty"`
	// a settle's actual - estimate, and what it reported forgiven
	Delta    int64 `json:"delta,omitempty"`
	Forgiven int64 `json:"forgiven,omitempty"`
	// a reservation's max wait, µs
	MaxWait int64 `json:"maxwait,omitempty"`
}

// slack widens each call's window, in µs: the process's clock reading and
// the server's are the same clock, each truncated to the microsecond.
const slack = 2

// model is the porcupine model over a history of ops, partitioned by
// tenant.
func model(q quotas) porcupine.Model {
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
		Init: func() []interface{} {
			var st state
			for i := range nb {
				st.b[i].tok = q.b[i].capacity
			}
			return []interface{}{st}
		},
		Step: func(st, in, out interface{}) []interface{} {
			next := q.step(st.(state), in.(input), out.(output))
			res := make([]interface{}, len(next))
			for i, s := range next {
				res[i] = s
			}
			return res
		},
		Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(input), out.(output)
			s := fmt.Sprintf("%s cost %v [%d,%d] -> %.17g @%v", kindNames[i.kind], i.costs, i.lo, i.hi, o.tokens, o.stamps)
			if i.slot {
				s += fmt.Sprintf(" held %d", o.held)
			}
			if i.kind == reserved || i.kind == reserveDenied || i.kind == reserveFailed {
				s += fmt.Sprintf(" max wait %dµs", i.maxWait)
			}
			if i.kind == settled || i.kind == settleFailed {
				s += fmt.Sprintf(" delta %d forgiven %d", i.delta, i.forgiven)
			}
			return s
		},
		DescribeState: func(s interface{}) string {
			st := s.(state)
			var out string
			for i, b := range st.b {
				out += fmt.Sprintf("[%d] %.17g @%d debt %d owed [%g,%g] refund %g given %g; ", i, b.tok, b.last, b.debt, b.owedLo, b.owedHi, b.refund, b.given)
			}
			return out + fmt.Sprintf("slots %d held, up to %d orphans", st.holders, st.orphans)
		},
	}
	return nm.ToModel()
}

// operations turns recorded ops into porcupine's history: degraded ops
// without a store call are left out (they touch no bucket).
//
// A deny-cache denial of replica r sent at t is answered from a store
// denial D of r sent, on r's clock, less than q.denyAge before; D missed
// only the refunds that returned after D's call, which began at most the
// longest store denial of r before D read the clock, and r's clock moved
// at most its offsets' spread apart from the wall clock: so it may ignore
// the refunds that returned after t - (denyAge + spread + longest denial).
func operations(q quotas, ops []op) []porcupine.Operation {
	windows := map[int]int64{}
	var keep int64
	if q.denyAge > 0 {
		offLo, offHi, longest := map[int]int64{}, map[int]int64{}, map[int]int64{}
		for _, o := range ops {
			lo, ok := offLo[o.Replica]
			offLo[o.Replica] = o.OffLo
			if ok {
				offLo[o.Replica] = min(lo, o.OffLo)
			}
			offHi[o.Replica] = max(offHi[o.Replica], o.OffHi)
			if o.Kind == denied {
				longest[o.Replica] = max(longest[o.Replica], (o.Return-o.Call)/1000+slack)
			}
		}
		for r := range offLo {
			windows[r] = q.denyAge + offHi[r] - min(0, offLo[r]) + longest[r] + slack
		}
		// a later-linearized denial returned after this op's call, and
		// was called at most the longest deny-cache denial before
		for _, o := range ops {
			if o.Kind == localDenied {
				keep = max(keep, windows[o.Replica]+(o.Return-o.Call)/1000+slack)
			}
		}
	}
	h := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		if o.NotSent || o.Kind == leased {
			continue
		}
		ret := o.Return + o.Extension
		// the other replicas' clocks are never stepped: a negative
		// offset is this replica's lag behind them
		in := input{kind: o.Kind, costs: [nb]int64{o.Cost, o.AlsoCost}, lease: o.Lease, lag: max(0, -o.OffLo),
			slot: o.Slot, delta: o.Delta, forgiven: o.Forgiven, maxWait: o.MaxWait,
			lo: o.Call/1000 + o.OffLo - slack, hi: ret/1000 + o.OffHi + slack,
			call: o.Call / 1000, ret: ret/1000 + slack, window: windows[o.Replica], keep: keep}
		out := output{tokens: [nb]float64{o.Tokens, o.AlsoTokens}, stamps: [nb]int64{o.Stamp, o.AlsoStamp}, held: o.Held}
		h = append(h, porcupine.Operation{ClientId: o.Replica*1000 + o.Client, Input: in, Call: o.Call,
			Output: out, Return: ret, Metadata: o.Key})
	}
	return h
}
