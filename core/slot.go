package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"go.opentelemetry.io/otel/metric"
)

// concurrencyScript checks a request of a bucket set with a concurrency
// limit, and renews slots. Only such requests send it: the token-bucket
// script's paths stay as they are for every other request.
var concurrencyScript = transport.NewScript(lua.Concurrency())

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

// slotCall is what a check of a bucket set with a concurrency limit adds
// to the script call: the bucket, its slot set and the new slot's id.
type slotCall struct {
	index int // the bucket with the limit
	key   string
	id    string
}

// slotIDs makes slot ids unique across the fleet: a random prefix per
// process and a counter.
var slotIDs = struct {
	prefix string
	n      atomic.Uint64
}{prefix: randomPrefix()}

func randomPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on a broken source)
	return hex.EncodeToString(b[:]) + "-"
}

func (l *Limiter) newSlotID() string {
	id := slotIDs.prefix + strconv.FormatUint(slotIDs.n.Add(1), 36)
	if l.cfg.slotGroup != "" {
		return l.cfg.slotGroup + "/" + id
	}
	return id
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
	v, err := concurrencyScript.Run(cctx, l.store.scripts, concurrencyScript.Line([]string{key}, l.nowArg(), id, l.slots.leaseMicros, l.slots.ttl, "free", group))
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

// slotLine is the concurrency script's command line for a check. costs,
// when not nil, is each bucket's cost: the cost argument is "" and each
// bucket's group carries its own (see the script's header).
func (l *Limiter) slotLine(keys []string, buckets []quota.Bucket, now string, cost int64, costs []int64, quotas [][3]any, s *slotCall) []any {
	all := make([]string, 0, len(keys)+1)
	all = append(append(all, keys...), s.key)
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
	args = append(args, strconv.FormatInt(buckets[s.index].Quota.Concurrency, 10), l.slots.leaseMicros, s.id, l.slots.ttl)
	return concurrencyScript.Line(all, args...)
}

// parseSlotReply decodes the concurrency script's reply (see its header).
func (l *Limiter) parseSlotReply(v any, buckets []quota.Bucket, cost int64, costs []int64, ci int) (Decision, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5+len(buckets) {
		return Decision{}, fmt.Errorf("%w: concurrency script reply %T of length %d", errProtocol, v, len(a))
	}
	allowed, ok1 := a[0].(int64)
	reason, ok2 := a[1].(int64)
	binding, ok3 := a[2].(int64)
	held, ok4 := a[3].(int64)
	wait, ok5 := a[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || binding < 1 || int(binding) > len(buckets) || reason < 0 || reason > 3 ||
		(allowed == 1) != (reason == 0) || held < 0 || wait < 0 {
		return Decision{}, fmt.Errorf("%w: concurrency script reply header %v", errProtocol, a[:5])
	}
	toks := make([]float64, len(buckets))
	stamps := make([]int64, len(buckets))
	for i := range buckets {
		s, ok := a[5+i].(string)
		if !ok {
			return Decision{}, fmt.Errorf("%w: script reply element %T, want a string", errProtocol, a[5+i])
		}
		tok, stamp, err := parseTokens(s)
		if err != nil {
			return Decision{}, err
		}
		toks[i], stamps[i] = tok, stamp
	}
	if reason != 3 {
		d := decide(buckets, toks, stamps, int(binding-1), reason, cost, costs)
		d.Buckets[ci].InFlight = held
		return d, nil
	}
	states := make([]BucketState, len(buckets))
	for i, b := range buckets {
		states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: toks[i]}
	}
	states[ci].InFlight = held
	d := newDecision(states, ci, ReasonConcurrencyLimit, 0, cost)
	d.RetryAfter = time.Duration(wait) * time.Microsecond
	if l.cfg.slotRetry > 0 && l.cfg.slotRetry < d.RetryAfter {
		d.RetryAfter = l.cfg.slotRetry
	}
	return d, nil
}

// newSlot starts holding the slot a check took: renewed until released.
// sent is when the check started: the slot's deadline is no later than
// sent plus the lease.
func (l *Limiter) newSlot(req Request, b quota.Bucket, key, id string, sent time.Time) *Slot {
	s := &Slot{l: l, key: key, id: id, stop: make(chan struct{}), tried: make(chan struct{}),
		labels: l.metrics.slotSet(req, b.Name)}
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
	line := concurrencyScript.Line([]string{s.key}, s.l.nowArg(), s.id, s.l.slots.leaseMicros, s.l.slots.ttl)
	v, err := concurrencyScript.Run(ctx, s.l.store.scripts, line)
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
const maxReleaseBatch = 256

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

// slotSettings formats the lease for the script, once.
func (l *Limiter) slotSettings() {
	l.slots.leaseMicros = strconv.FormatInt(l.cfg.slotLease.Microseconds(), 10)
	ms := (l.cfg.slotLease + time.Millisecond - 1) / time.Millisecond // rounded up
	l.slots.ttl = strconv.FormatInt(int64(ms)+1000, 10)
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

// forgets frees the slots of checks whose answer was not delivered (a
// timeout, a late reply, a caller gone: the failure policy, a shed or a
// cancellation answered it): the store may have run the check's script, or
// may run it later, from a connection the process gave up on. Each is
// forgotten by the concurrency script's Forget (see its header), which
// removes the slot if it was taken and otherwise leaves a tombstone that
// stops the take: either order frees it. The pending ones are sent in one
// pipeline by a background worker, and retried with back-off (as releases
// are) until the store answers each or its lease from the check has run
// out; one given up is counted as a release that failed.
type forgets struct {
	mu      sync.Mutex
	pending []forget
	running bool
	// wake tells a worker waiting out a back-off that a new forget came:
	// a new one is sent at once (with the ones being retried), as a
	// release is
	wake chan struct{}
}

type forget struct {
	key, id string
	until   time.Time // retried until then: the lease from the check
	labels  metric.AddOption
}

// forgetSlot forgets the slot s of req's check (see forgets).
func (l *Limiter) forgetSlot(req Request, b quota.Bucket, s *slotCall) {
	f := forget{key: s.key, id: s.id, until: time.Now().Add(l.cfg.slotLease), labels: l.metrics.slotSet(req, b.Name)}
	fs := &l.slots.forgets
	fs.mu.Lock()
	fs.pending = append(fs.pending, f)
	if fs.running {
		fs.mu.Unlock()
		select {
		case fs.wake <- struct{}{}:
		default: // already woken
		}
		return
	}
	l.slots.mu.Lock()
	closed := l.slots.closed
	if !closed {
		l.slots.wg.Add(1)
	}
	l.slots.mu.Unlock()
	if closed {
		// the limiter is closing: one attempt, now
		batch := fs.pending
		fs.pending = nil
		fs.mu.Unlock()
		l.giveUp(l.sendForgets(batch))
		return
	}
	fs.running = true
	if fs.wake == nil {
		fs.wake = make(chan struct{}, 1)
	}
	fs.mu.Unlock()
	go l.forgetLoop(fs.wake)
}

// forgetLoop sends the pending forgets until none is left, retrying the
// failed ones with back-off within their leases (a new forget ends the
// wait); once the limiter closes, each is tried once more.
func (l *Limiter) forgetLoop(wake chan struct{}) {
	defer l.slots.wg.Done()
	fs := &l.slots.forgets
	backoff := 25 * time.Millisecond
	closing := false
	for {
		fs.mu.Lock()
		batch := fs.pending
		fs.pending = nil
		if len(batch) == 0 {
			fs.running = false
			fs.mu.Unlock()
			return
		}
		fs.mu.Unlock()
		failed := l.sendForgets(batch)
		if closing {
			l.giveUp(failed)
			continue
		}
		if len(failed) == 0 {
			backoff = 25 * time.Millisecond
			continue
		}
		now := time.Now()
		keep := failed[:0]
		for _, f := range failed {
			if now.Add(backoff).Before(f.until) {
				keep = append(keep, f)
			} else {
				l.giveUp([]forget{f})
			}
		}
		fs.mu.Lock()
		fs.pending = append(keep, fs.pending...)
		fs.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
			backoff = min(2*backoff, time.Second)
		case <-wake:
			t.Stop()
		case <-l.slots.closing:
			t.Stop()
			closing = true
		}
	}
}

// giveUp counts forgets that never reached the store: their slots, if the
// store takes them, expire at their deadline.
func (l *Limiter) giveUp(failed []forget) {
	for _, f := range failed {
		l.metrics.slotExpired(f.labels, "release_failed")
	}
}

// sendForgets runs batch's forgets, pipelined (maxReleaseBatch to a round
// trip, each bounded by the store timeout), and returns those the store did
// not answer. After a round trip the store answered none of, the rest wait
// for the next attempt: an outage costs one timeout per attempt, not one
// per round trip.
func (l *Limiter) sendForgets(batch []forget) (failed []forget) {
	now := l.nowArg()
	for len(batch) > 0 {
		part := batch[:min(len(batch), maxReleaseBatch)]
		batch = batch[len(part):]
		lines := make([][]any, len(part))
		for i, f := range part {
			lines[i] = concurrencyScript.Line([]string{f.key}, now, f.id, l.slots.leaseMicros, l.slots.ttl, "forget")
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
		cmds := make([]*redis.Cmd, len(part))
		_, _ = l.store.scripts.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, line := range lines {
				cmds[i] = redis.NewCmd(ctx, line...)
				cmds[i].SetFirstKeyPos(3)
				_ = p.Process(ctx, cmds[i])
			}
			return nil
		})
		before := len(failed)
		for i, f := range part {
			err := cmds[i].Err()
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				// the store lost its script cache: EVAL loads it
				_, err = concurrencyScript.Run(ctx, l.store.scripts, lines[i])
			}
			if err != nil {
				l.logDegraded("tollgate: the concurrency slot of an unanswered check could not be freed; retrying within its lease", Request{}, err, "key", f.key)
				failed = append(failed, f)
			}
		}
		cancel()
		if len(failed)-before == len(part) {
			return append(failed, batch...)
		}
	}
	return failed
}
