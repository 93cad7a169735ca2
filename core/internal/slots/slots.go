// Package slots is the concurrency slots' layer of the check path: it
// names the slot a check of a bucket set with a concurrency limit takes,
// hands the slot the store gave an admitted check up to its caller (who
// holds it from then on), bounds the retry hint of a check denied for want
// of one, and frees the slot of a check whose answer was not delivered
// (see Forgets). The holding of an admitted check's slot (its renewal and
// release) is its caller's.
package slots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// Layer is the slots' layer. A call without a slot passes through.
type Layer struct {
	group   string        // the slot group's id prefix, "group/"; "" for none
	retry   time.Duration // the most a denial for want of a slot waits; 0: the deadline
	forgets *Forgets
	next    stack.Layer
}

// NewLayer returns the slots' layer above next: slot ids of group (""
// for none), a denial's retry at most retry (0: until the earliest
// slot's deadline), unanswered checks' slots freed by forgets.
func NewLayer(group string, retry time.Duration, forgets *Forgets, next stack.Layer) *Layer {
	if group != "" {
		group += "/"
	}
	return &Layer{group: group, retry: retry, forgets: forgets, next: next}
}

// Decide names c's slot, and hands the slot the store gave it, if any, up
// with its result.
func (l *Layer) Decide(ctx context.Context, c stack.Call) (stack.Result, error) {
	if c.Slot.Key == "" {
		return l.next.Decide(ctx, c)
	}
	c.Slot.ID = l.group + newID()
	r, err := l.next.Decide(ctx, c)
	takes := Takes(c)
	if err != nil {
		if takes && !neverRun(err) {
			// the store may run it, or have run it: whatever the caller is
			// answered, it holds no slot
			l.forgets.Forget(c)
		}
		return r, err
	}
	if r.Verdict == stack.ConcurrencyLimit && l.retry > 0 && l.retry < r.Retry {
		r.Retry = l.retry
	}
	if r.Verdict == stack.OK && takes {
		r.Slot = c.Slot
	}
	return r, nil
}

// Takes reports whether a check of the concurrency script takes a slot
// when admitted: any cost above 0 (all 0 is a peek).
func Takes(c stack.Call) bool {
	if c.Costs == nil {
		return c.Charge > 0
	}
	return c.Cost > 0 || slices.ContainsFunc(c.Costs, func(k int64) bool { return k > 0 })
}

// ids makes slot ids unique across the fleet: a random prefix per
// process and a counter.
var ids = struct {
	prefix string
	n      atomic.Uint64
}{prefix: randomPrefix()}

func randomPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on a broken source)
	return hex.EncodeToString(b[:]) + "-"
}

func newID() string {
	return ids.prefix + strconv.FormatUint(ids.n.Add(1), 36)
}

// neverRun reports whether a failed check's script call certainly never
// ran in the store: shed or closed before it was sent, queued behind a
// stalled store, its connection never made (a failed dial: nothing was
// written), or refused by an error reply (the script takes its slot last,
// after every command that can fail).
func neverRun(err error) bool {
	var shed *transport.ShedError
	var op *net.OpError
	return errors.As(err, &shed) || errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrStalled) ||
		(errors.As(err, &op) && op.Op == "dial") || transport.IsErrorReply(err)
}
