package gate

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// DefaultMaxHolds is how many requests one Gate holds at once unless
// WithMaxHolds says otherwise.
const DefaultMaxHolds = 1024

// maxHoldWait is the longest hold a class may be given (a reservation's
// longest wait).
const maxHoldWait = 24 * time.Hour

// HeldHeader is the response header that says how long the gate held a
// request before its handler ran, in whole milliseconds rounded up; set
// only on a request that was held.
const HeldHeader = "Tollgate-Held-Ms"

// holds is a Gate's hold configuration and its count of requests held.
type holds struct {
	wait map[string]time.Duration // class -> longest hold; nil: none
	max  int64
	n    atomic.Int64
}

// WithHold holds a request of class over its rate for up to maxWait before
// answering 429: the request is reserved (core.Limiter.Hold) and its
// handler runs at the reservation's time, so a tenant slightly over its
// rate is served a little later instead of refused. A wait longer than
// maxWait is the usual 429, charging nothing. A client that leaves while
// held cancels its reservation, giving its tokens back as far as later
// reservations allow. A class with a concurrency limit is not held (it is
// checked as without this option). maxWait must be above 0 and at most 24
// hours, class a valid class name; a later WithHold of the same class
// replaces it. A held request carries the HeldHeader header. Default: no
// class is held.
func WithHold(class string, maxWait time.Duration) Option {
	return gateOptionFunc(func(g *Gate) error {
		if err := quota.ValidateName(class); err != nil {
			return errs.BadValue("gate.WithHold", err)
		}
		if maxWait <= 0 || maxWait > maxHoldWait {
			return errs.BadOption("gate.WithHold", "max wait %v is not above 0 and at most %v", maxWait, maxHoldWait)
		}
		if g.hold.wait == nil {
			g.hold.wait = map[string]time.Duration{}
		}
		g.hold.wait[class] = maxWait
		return nil
	})
}

// WithMaxHolds bounds how many requests the Gate holds at once (WithHold),
// so that a flood cannot pile up waiting goroutines: beyond n, a request
// is checked as without a hold (admitted now or answered 429). n must be
// at least 1. Default DefaultMaxHolds.
func WithMaxHolds(n int) Option {
	return gateOptionFunc(func(g *Gate) error {
		if n < 1 {
			return errs.BadOption("gate.WithMaxHolds", "max holds must be at least 1, got %d", n)
		}
		g.hold.max = int64(n)
		return nil
	})
}

// take counts one more request held, unless max are held already: the
// count never passes max, not even for a moment (Holding reads it).
func (h *holds) take() bool {
	for {
		n := h.n.Load()
		if n >= h.max {
			return false
		}
		if h.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Holding returns how many requests the Gate holds now (WithHold).
func (g *Gate) Holding() int { return int(g.hold.n.Load()) }

// check charges r to t: held when r's class is held and the Gate holds
// fewer than its maximum, else checked.
func (g *Gate) check(ctx context.Context, t quota.Tenant, r Route) (core.Decision, time.Duration, error) {
	req := core.Request{Tenant: t, Class: r.Class, Cost: r.Cost}
	if wait, ok := g.hold.wait[r.Class]; ok && g.hold.take() {
		defer g.hold.n.Add(-1)
		return g.lim.Hold(ctx, req, wait)
	}
	d, err := g.lim.Check(ctx, req)
	return d, 0, err
}

// heldHeader is the HeldHeader of a request held for d.
func heldHeader(d time.Duration) render.Header {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return render.Header{Name: HeldHeader, Value: strconv.FormatInt(int64(ms), 10)}
}
