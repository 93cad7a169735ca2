package core

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/internal/scriptcall"
	"github.com/tollgate-go/tollgate/core/internal/slots"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
	"go.opentelemetry.io/otel/metric"
)

// Slot defaults (WithConcurrencySlots states them).
const (
	defaultSlotLease = 10 * time.Second
	defaultSlotRetry = time.Second
)

// Slot is an admitted request's place among the concurrency slots of its
// tenant's bucket (Quota.Concurrency), held in the store as a lease: renewed
// in the background every third of the lease time while held, and freed by
// Release. A slot whose holder dies without releasing it (a crashed
// replica) frees itself when its lease runs out: no slot is held longer
// than the lease time past its holder's last renewal.
type Slot struct {
	l      *Limiter
	key    string
	id     string
	labels metric.AddOption
	once   sync.Once
	stop   chan struct{}
	tried  chan struct{} // closed once the first removal was answered (or the slot was gone)
	gone   atomic.Bool   // freed by Limiter.ReleaseAny: nothing left to remove
}

// Release frees the slot. It returns once the store has answered the
// removal (one round trip, pipelined with the other releases of the
// moment; at most the check timeout, or two while a renewal is under way),
// so that the caller's next request finds the slot free. When the store
// cannot be reached it returns after that one attempt, and the removal is
// retried in the background while the lease runs, after which the slot is
// left to expire (counted by the tollgate.slots.expired metric). It is safe
// to call more than once (a later call returns at once), and on a nil Slot
// (a request that holds none), where it does nothing.
func (s *Slot) Release() {
	if s == nil {
		return
	}
	first := false
	s.once.Do(func() { close(s.stop); first = true })
	if first {
		<-s.tried
	}
}

// ReleaseAny frees one concurrency slot of tenant t's class: s while the
// store still holds it, else, with a slot group (WithSlotGroup), the live
// slot of the group in the class's bucket with the earliest deadline,
// whichever process of the group holds it (that holder's next renewal
// finds it gone and stops; counted as tollgate.slots.expired{cause="lost"}).
// It is for callers that see a request's start and end as two calls that
// may reach different processes, as a gateway's hit and negative hit;
// every other caller releases its own Slot. s, when not nil, is released
// in any case (it must be a slot of t's class). It reports whether a slot
// was freed: false when none of the group's is in use, or when the class
// has no concurrency limit. One round trip, bounded by the check timeout
// and by ctx; a store failure returns an error wrapping ErrStore, and s is
// then released as Release does (retried within its lease).
func (l *Limiter) ReleaseAny(ctx context.Context, t quota.Tenant, class string, s *Slot) (bool, error) {
	if class == "" {
		class = quota.DefaultClass
	}
	key, id := "", ""
	if s != nil {
		key, id = s.key, s.id
	} else {
		if err := l.validate(Request{Tenant: t, Class: class}); err != nil {
			return false, err
		}
		bs, err := l.buckets(ctx, Request{Tenant: t, Class: class}, 0)
		if err != nil {
			return false, err
		}
		ci, err := concurrentBucket(bs)
		if err != nil || ci < 0 {
			return false, err
		}
		if key, err = l.keys.Slots(t.ID, bs[ci].Name); err != nil {
			return false, err
		}
	}
	group := ""
	if l.cfg.slotGroup != "" {
		group = l.cfg.slotGroup + "/"
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	v, err := scriptcall.Concurrency.Run(cctx, l.store.scripts, scriptcall.Concurrency.Line([]string{key}, l.nowArg(), id, l.slots.leaseMicros, l.slots.ttl, "free", group))
	if err != nil {
		s.Release()
		return false, transport.StoreError(cctx, l.cfg.timeout, err)
	}
	n, ok := v.(int64)
	if !ok {
		s.Release()
		return false, fmt.Errorf("%w: free reply %T", errProtocol, v)
	}
	if s != nil {
		s.gone.Store(true) // freed above, or already gone: nothing to remove
		s.Release()
	}
	return n == 1, nil
}

// newSlot starts holding the slot a check of req took in bucket b: renewed
// until released.
func (l *Limiter) newSlot(req *Request, b quota.Bucket, key, id string) *Slot {
	s := &Slot{l: l, key: key, id: id, stop: make(chan struct{}), tried: make(chan struct{}),
		labels: l.metrics.slotLabels(req.Tenant.Tier, req.Class, b.Name)}
	l.slots.mu.Lock()
	closed := l.slots.closed
	if !closed {
		l.slots.wg.Add(1)
	}
	l.slots.mu.Unlock()
	l.metrics.slotsHeld.Add(context.Background(), 1, s.labels)
	if closed {
		// the limiter is closing: free it now, once
		s.once.Do(func() { close(s.stop) })
		s.release(time.Time{}, false)
		return s
	}
	go s.hold(time.Now().Add(l.cfg.slotLease))
	return s
}

// hold renews the slot every third of the lease until it is released or
// the limiter closes, then releases it in the store. deadline is the
// latest time, on this process's clock, by which the store is known to
// hold the slot.
func (s *Slot) hold(deadline time.Time) {
	defer s.l.slots.wg.Done()
	lease := s.l.cfg.slotLease
	t := time.NewTimer(lease / 3)
	defer t.Stop()
	lost := false
	for {
		select {
		case <-s.stop:
			s.release(deadline, lost)
			return
		case <-s.l.slots.closing:
			s.release(deadline, lost)
			return
		case <-t.C:
			if lost {
				continue
			}
			at := time.Now()
			ok, err := s.renew()
			switch {
			case err == nil && ok:
				deadline = at.Add(lease)
			case err == nil:
				// gone: reset, or expired while the store could not be
				// reached; another request may hold its place now
				lost = true
				s.l.metrics.slotExpired(s.labels, "lost")
			}
			t.Reset(lease / 3)
		}
	}
}

// renew moves the slot's deadline to the store's now plus the lease; false
// without an error: the slot is gone.
func (s *Slot) renew() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.l.cfg.timeout)
	defer cancel()
	line := scriptcall.Concurrency.Line([]string{s.key}, s.l.nowArg(), s.id, s.l.slots.leaseMicros, s.l.slots.ttl)
	v, err := scriptcall.Concurrency.Run(ctx, s.l.store.scripts, line)
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("%w: renew reply %T", errProtocol, v)
	}
	return n == 1, nil
}

// release removes the slot from the store, retrying while its lease still
// runs (at most until deadline, and once more only when the limiter
// closes); a slot it cannot remove is left to expire, and counted. lost: the
// store no longer has it.
func (s *Slot) release(deadline time.Time, lost bool) {
	defer s.l.metrics.slotsHeld.Add(context.Background(), -1, s.labels)
	if lost || s.gone.Load() {
		close(s.tried)
		return
	}
	ok := s.remove()
	close(s.tried) // Release returns: the rest is the background's
	backoff := 25 * time.Millisecond
	for ; !ok; ok = s.remove() {
		if !time.Now().Add(backoff).Before(deadline) {
			s.l.metrics.slotExpired(s.labels, "release_failed")
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.l.slots.closing:
			t.Stop()
			if !s.remove() {
				s.l.metrics.slotExpired(s.labels, "release_failed")
			}
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// remove deletes the slot from the store, once, within the store timeout,
// in one pipeline with the other releases of the moment.
func (s *Slot) remove() bool {
	if err := s.l.slots.releases.do(s.l, s.key, s.id); err != nil {
		s.l.logDegraded("tollgate: a concurrency slot could not be released; retrying within its lease", Request{}, err, "key", s.key)
		return false
	}
	return true
}

// releases pipelines the releases (ZREM) of the slots that end at the same
// time: the first one to find no pipeline under way sends every release
// queued meanwhile, then those queued while it was sent, and so on. A
// release alone is one ZREM; under load one round trip carries many, which
// is what the store's CPU per decision pays for (docs/benchmarks.md).
type releases struct {
	mu       sync.Mutex
	pending  []*release
	flushing bool
}

type release struct {
	key, id string
	err     chan error
}

// maxReleaseBatch bounds one pipeline.
const maxReleaseBatch = slots.MaxBatch

func (r *releases) do(l *Limiter, key, id string) error {
	req := &release{key: key, id: id, err: make(chan error, 1)}
	r.mu.Lock()
	r.pending = append(r.pending, req)
	if r.flushing {
		r.mu.Unlock()
		return <-req.err
	}
	r.flushing = true
	for len(r.pending) > 0 {
		batch := r.pending[:min(len(r.pending), maxReleaseBatch)]
		r.pending = r.pending[len(batch):]
		r.mu.Unlock()
		r.send(l, batch)
		r.mu.Lock()
	}
	r.pending = nil
	r.flushing = false
	r.mu.Unlock()
	return <-req.err
}

// send removes batch's slots in one pipeline bounded by the store timeout,
// and hands each its own answer.
func (r *releases) send(l *Limiter, batch []*release) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(batch))
	_, _ = l.store.scripts.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, rel := range batch {
			cmds[i] = p.ZRem(ctx, rel.key, rel.id)
		}
		return nil
	})
	for i, rel := range batch {
		rel.err <- cmds[i].Err()
	}
}

// nowArg is the script's clock argument: "" for the server clock, else the
// limiter's clock in microseconds.
func (l *Limiter) nowArg() string {
	if l.cfg.clock != nil {
		return strconv.FormatInt(l.now().UnixMicro(), 10)
	}
	return ""
}

// closeSlots frees every slot still held (once each) and waits for the
// releases, each bounded by the store timeout.
func (l *Limiter) closeSlots() {
	l.slots.mu.Lock()
	if !l.slots.closed {
		l.slots.closed = true
		close(l.slots.closing)
	}
	l.slots.mu.Unlock()
	l.slots.wg.Wait()
}
