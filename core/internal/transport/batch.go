package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

// Batcher coalesces concurrent checks into pipelined round trips, without a
// dispatcher goroutine and without lingering. A check that finds fewer than
// inflight batches on the wire sends at once, itself, together with whatever
// is queued (at low concurrency this is a plain call: no hand-off, no added
// latency). A check that finds every slot busy queues; when a batch comes
// back, the queue goes out as the next batch. So batches grow exactly as
// fast as Redis answers.
//
// On a Cluster, each master has a lane of its own (its batches in flight,
// its queue, its evidence of what came back): a check joins the lane of
// the master that holds its keys (a tenant's keys share one slot), and a
// batch carries only that master's checks, so a slow or silent master holds
// only its own tenants' checks, never a batch or a queue of another
// master's. A check whose master is not known (no slot map yet) takes a
// lane of its own, shared by every such check. A standalone, failover or
// Ring client has one lane.
//
// Time in the queue is the process's, not the store's: a command's store
// timeout starts when its batch is handed to the connection. A queued check
// waits at most LocalBudget(timeout) for its batch to leave; one that waited longer
// is taken out of the queue unsent and shed (ShedError, ReasonOverloaded) when
// its lane's batches kept coming back meanwhile, or answered by the failure policy
// (ErrStalled) when none did: then the store, not this process, held it. So is
// is a check that finds its lane's queue full or its tenant's share of the
// queues full (maxPerTenant: one tenant's flood is shed, other tenants' checks still
// reach Redis). A shed check was never sent, so it charged nothing and says
// nothing about the store.
//
// Every command in a pipeline is EVALSHA. The script is loaded on a lane's
// master before its first batch, and again when a reply says NOSCRIPT (a
// restart, failover or SCRIPT FLUSH): a NOSCRIPT command was not executed, so
// only those are sent again. A command that timed out or lost its connection
// is never replayed: every script command is a noRetryCmd, so go-redis does
// not resend it or the pipeline holding it, whatever MaxRetries says.
type Batcher struct {
	client     redis.UniversalClient
	cluster    *redis.ClusterClient // nil: one lane
	script     *Script
	timeout    time.Duration // the store timeout (a queued check's budget is localBudget of it)
	ctxTimeout time.Duration // set on each call's context when the client's sockets do not bound it
	maxBatch   int
	inflight   int                   // batches on the wire per lane
	maxPending int                   // checks queued per lane
	sizes      metric.Int64Histogram // checks per round trip (nil: not recorded)
	shares     *tenantShares         // queued checks by tenant, in every lane

	one   lane           // the only lane, or on a Cluster the lane of checks whose master is not known
	lanes *masters[lane] // a lane per Cluster master
	wg    sync.WaitGroup
}

// lane is one master's share of the batcher: its batches in flight, the
// checks waiting for one, and what came back.
type lane struct {
	b *Batcher
	// node is the master the lane's script is loaded on; nil: the client's
	// (every master of a Cluster)
	node *redis.Client

	mu      sync.Mutex
	active  atomic.Int32             // batches on the wire; changed under mu, read without
	pending fairQueue[*pendingCheck] // checks waiting for a batch
	// since is when the queue last moved (a batch left) or, if later,
	// began (unix nanos); see stale
	since  int64
	closed bool // Close was called: checks are refused
	// backSent is when the latest batch that came back with a reply was
	// sent (unix nanos), and next is the next batch to come back: a check
	// that waited out its budget in the queue was held by this process when
	// a batch sent after it queued came back answered, or when the next one
	// does; by the store's silence when not (see judgeWait). next is nil
	// until a check waits for it: a batch that comes back with nobody
	// waiting allocates nothing
	backSent atomic.Int64
	next     atomic.Pointer[cycle]

	loadMu sync.Mutex
	loaded bool
}

// pendingCheck is one check's script call as the batcher holds it.
type pendingCheck struct {
	ctx    context.Context // the caller's
	tenant string
	args   []any // the whole EVALSHA command line, see Script.Args
	v      any
	err    error
	queued time.Time     // when it was queued
	sent   time.Time     // when its command was handed to the connection
	state  atomic.Int32  // queued, taken or abandoned
	done   chan struct{} // buffered: finish sends exactly once, never blocks
}

// A pendingCheck's state: queued until a batch takes it (then it is sent)
// or its caller abandons it (then it never is).
const (
	queued int32 = iota
	taken
	abandoned
)

// pendingChecks recycles records with their channels. A record goes back
// only from a caller that received its answer: one that left first leaves
// it to the batch that still holds it, or to the collector.
var pendingChecks = sync.Pool{New: func() any { return &pendingCheck{done: make(chan struct{}, 1)} }}

// result takes the answer of a finished check and recycles the record.
func (c *pendingCheck) result() (any, time.Time, error) {
	v, sent, err := c.v, c.sent, c.err
	c.ctx, c.tenant, c.args, c.v, c.err, c.queued, c.sent = nil, "", nil, nil, nil, time.Time{}, time.Time{}
	c.state.Store(queued)
	pendingChecks.Put(c)
	return v, sent, err
}

const (
	defaultMaxBatch = 128
	defaultInflight = 2
	// maxInflight bounds a lane's batches on the wire when its queue is
	// stale (see lane.stale)
	maxInflight       = 4 * defaultInflight
	defaultMaxPending = 16 * defaultMaxBatch
	// defaultMaxPerTenant is one tenant's share of the queue: a quarter of
	// it (512). One batch (128) was too little: a hot tenant behind 256
	// connections to one replica, on a quiet machine with Redis answering
	// in milliseconds, had a quarter of its checks shed (503) instead of
	// decided; a quarter keeps three for the other tenants, and the queue
	// is served round robin by tenant whatever its length.
	defaultMaxPerTenant = defaultMaxPending / 4
)

// NewBatcher returns a Batcher sending script through client (see Client):
// timeout is the store timeout, ctxTimeout the bound set on each call's
// context, sizes (nil: none) observes each batch's size.
func NewBatcher(client redis.UniversalClient, script *Script, timeout, ctxTimeout time.Duration, sizes metric.Int64Histogram) *Batcher {
	b := &Batcher{client: client, script: script, timeout: timeout, ctxTimeout: ctxTimeout, maxBatch: defaultMaxBatch, inflight: defaultInflight,
		maxPending: defaultMaxPending, sizes: sizes, shares: newTenantShares(defaultMaxPerTenant)}
	b.cluster, _ = client.(*redis.ClusterClient)
	b.one.init(b, nil)
	b.lanes = newMasters(client, &b.one, func(node *redis.Client) *lane {
		ln := &lane{}
		ln.init(b, node)
		return ln
	})
	return b
}

func (ln *lane) init(b *Batcher, node *redis.Client) {
	ln.b, ln.node, ln.pending = b, node, newFairQueue[*pendingCheck]()
}

// ErrClosed is a check made after Close.
var ErrClosed = errors.New("limiter closed")

// ErrStalled is a check that waited out its budget in the queue while the
// store answered no batch sent since (see judgeWait): the store, not this
// process, held it. It is answered by the failure policy; the batches ahead
// count toward the breaker, it does not.
var ErrStalled = errors.New("queued behind batches the store did not answer within the timeout")

// ShedError is a check this process could not make in time: never sent
// (or its reply late while the store answered newer calls), no evidence
// about the store. Cause is its label in the shed metric. It unwraps to
// ErrOverloaded.
type ShedError struct{ Cause, Why string }

func (e *ShedError) Error() string { return "tollgate: check shed: " + e.Why }
func (e *ShedError) Unwrap() error { return ErrOverloaded }

// ErrOverloaded is what every ShedError wraps; the limiter exports it as
// ErrOverloaded.
var ErrOverloaded = errors.New("tollgate: overloaded, check shed")

var (
	errQueueFull   = &ShedError{"queue_full", "too many checks waiting for the store"}
	errTenantShare = &ShedError{"tenant_share", "this tenant holds its whole share of the checks waiting for the store"}
	errQueueWait   = &ShedError{"queue_wait", "waited in the queue longer than its budget"}
)

// Do runs the script for one check of tenant through the batcher and
// returns its answer and when its command was sent, or ctx's error when the
// caller leaves first, or a shedError.
func (b *Batcher) Do(ctx context.Context, tenant string, args []any) (any, time.Time, error) {
	return b.lanes.of(ctx, args).do(ctx, tenant, args)
}

func (ln *lane) do(ctx context.Context, tenant string, args []any) (any, time.Time, error) {
	b := ln.b
	// a check that will queue takes its tenant's share first, without the
	// lock: a flood of refused checks never waits on mu ahead of the
	// batches that serve every tenant
	held := false
	if int(ln.active.Load()) >= b.inflight {
		if !b.shares.take(tenant) {
			return nil, time.Time{}, errTenantShare
		}
		held = true
	}
	ln.mu.Lock()
	if ln.closed {
		ln.mu.Unlock()
		b.release(held, tenant)
		return nil, time.Time{}, ErrClosed
	}
	if int(ln.active.Load()) < b.inflight && ln.pending.n == 0 {
		// alone (low concurrency): a plain call, inline, with nothing to
		// hand over, so that one caller pays nothing for the batcher
		ln.active.Add(1)
		b.wg.Add(1)
		ln.mu.Unlock()
		b.release(held, tenant)
		if b.sizes != nil {
			b.sizes.Record(context.Background(), 1)
		}
		sent := time.Now()
		v, err := b.single(ctx, args)
		ln.back(sent, err == nil || IsErrorReply(err))
		ln.handOff()
		return v, sent, err
	}
	if int(ln.active.Load()) >= b.inflight && !ln.stale(b) {
		if !held && !b.shares.take(tenant) {
			ln.mu.Unlock()
			return nil, time.Time{}, errTenantShare
		}
		if ln.pending.n >= b.maxPending {
			ln.mu.Unlock()
			b.shares.leave(tenant)
			return nil, time.Time{}, errQueueFull
		}
		c := pendingChecks.Get().(*pendingCheck)
		c.ctx, c.tenant, c.args, c.queued = ctx, tenant, args, time.Now()
		if ln.pending.n == 0 {
			ln.since = c.queued.UnixNano()
		}
		ln.pending.push(tenant, c)
		ln.mu.Unlock()
		return c.wait(ctx, ln)
	}
	// a batch slot is free, or the queue is stale: this check leads a
	// batch of itself and what is queued
	ln.active.Add(1)
	c := pendingChecks.Get().(*pendingCheck)
	c.ctx, c.tenant, c.args = ctx, tenant, args
	c.state.Store(taken)
	batch := ln.take(c)
	b.wg.Add(1)
	ln.mu.Unlock()
	b.release(held, tenant)
	ln.lead(batch)
	<-c.done // finished by the batch just sent
	return c.result()
}

// release gives back a share taken for a check that did not queue.
func (b *Batcher) release(held bool, tenant string) {
	if held {
		b.shares.leave(tenant)
	}
}

// wait returns c's answer. A caller that leaves first gets its context's
// error; one whose check is still queued after the timeout is shed
// (errQueueWait), or fails with ErrStalled when no batch of its lane came
// back meanwhile. Once its batch took it, its command is on the wire and the
// answer comes within the batch's store timeout.
func (c *pendingCheck) wait(ctx context.Context, ln *lane) (any, time.Time, error) {
	t := getTimer(LocalBudget(ln.b.timeout))
	defer putTimer(t)
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
		c.state.CompareAndSwap(queued, abandoned) // taken: the batch finishes it
		return nil, time.Time{}, ctx.Err()
	case <-t.C:
		if c.state.CompareAndSwap(queued, abandoned) {
			return nil, time.Time{}, ln.judgeWait(ctx, c.queued)
		}
	}
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
}

// timers recycles the timers that bound a wait in this process (a queued
// check's, a wait for a connection): most waits end before them.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// getTimer returns a timer firing in d.
func getTimer(d time.Duration) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

// putTimer stops t, drains its channel (a timer that fired unread, under
// asynctimerchan=1) and recycles it.
func putTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// cycle is one batch coming back: done is closed when it has, answered
// set before that when it brought a reply.
type cycle struct {
	done     chan struct{}
	answered bool
}

// judgeWait tells who held a check that waited out its budget in the queue
// since queued (it was never sent): this process (errQueueWait: shed) when
// a batch of its lane sent after it queued came back with a reply, or when
// the lane's next batch to come back does; the store (ErrStalled) when that
// batch brings no reply either. The batches in flight end within the store
// timeout.
func (ln *lane) judgeWait(ctx context.Context, queued time.Time) error {
	if ln.backSent.Load() >= queued.UnixNano() {
		return errQueueWait
	}
	cy := ln.nextBack()
	t := time.NewTimer(LocalBudget(ln.b.timeout)) // the batches in flight end within the store timeout; this bounds the wait should the process be starved
	defer t.Stop()
	select {
	case <-cy.done:
		if cy.answered {
			return errQueueWait
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return ErrStalled
}

// back notes that a batch sent at sent came back, answered when with at
// least one reply.
func (ln *lane) back(sent time.Time, answered bool) {
	if n := sent.UnixNano(); answered && ln.backSent.Load() < n {
		ln.backSent.Store(n)
	}
	if cy := ln.next.Swap(nil); cy != nil {
		cy.answered = answered
		close(cy.done)
	}
}

// nextBack returns the cycle of the lane's next batch to come back, made by
// the first check that waits for it.
func (ln *lane) nextBack() *cycle {
	for {
		if cy := ln.next.Load(); cy != nil {
			return cy
		}
		cy := &cycle{done: make(chan struct{})}
		if ln.next.CompareAndSwap(nil, cy) {
			return cy
		}
	}
}

// stale reports whether the lane's queue has waited half a queued check's
// budget for a batch to leave while an extra batch may still go out
// (fewer than maxInflight on the wire): its batches' store timeouts passed
// long since, so their leaders, with a reply or a timeout in hand, wait to
// be run (the process is starved of CPU, e.g. by a flood on thousands of
// connections). A check that finds the queue stale leads a batch of its own
// with the queue's head in it, instead of queueing behind them: the checks
// queued leave within their budget, and are not shed for the leaders'
// wait. Callers hold mu.
func (ln *lane) stale(b *Batcher) bool {
	return ln.pending.n > 0 && int(ln.active.Load()) < maxInflight &&
		time.Now().UnixNano()-ln.since >= int64(LocalBudget(b.timeout)/2)
}

// take returns first plus up to maxBatch-1 queued checks, in the fair
// queue's round-robin order, dropping the abandoned ones. Callers hold mu.
func (ln *lane) take(first *pendingCheck) []*pendingCheck {
	b := ln.b
	ln.since = time.Now().UnixNano()
	batch := make([]*pendingCheck, 0, min(ln.pending.n, b.maxBatch-1)+1)
	batch = append(batch, first)
	for len(batch) < b.maxBatch {
		c, ok := ln.pending.pop()
		if !ok {
			break
		}
		b.shares.leave(c.tenant)
		if c.state.CompareAndSwap(queued, taken) {
			batch = append(batch, c)
		}
	}
	return batch
}

func (c *pendingCheck) finish(v any, err error) {
	c.v, c.err = v, err
	c.done <- struct{}{}
}

// lead sends batch, then hands what queued meanwhile to a new leader, or
// frees its slot.
func (ln *lane) lead(batch []*pendingCheck) {
	ln.send(batch)
	ln.handOff()
}

// handOff, after a batch came back, sends what queued meanwhile as the next
// batch from a new leader, or frees the slot.
func (ln *lane) handOff() {
	b := ln.b
	defer b.wg.Done()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for first, ok := ln.pending.pop(); ok; first, ok = ln.pending.pop() {
		b.shares.leave(first.tenant)
		if !first.state.CompareAndSwap(queued, taken) {
			continue // abandoned: never sent
		}
		next := ln.take(first)
		b.wg.Add(1)
		go ln.lead(next)
		return
	}
	ln.active.Add(-1)
}

// send runs one batch as a pipeline and hands each caller its reply.
func (ln *lane) send(batch []*pendingCheck) {
	b := ln.b
	if b.sizes != nil {
		b.sizes.Record(context.Background(), int64(len(batch)))
	}
	// checks whose caller already left are not sent
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.finish(nil, c.ctx.Err())
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	sent := time.Now()
	for _, c := range live {
		c.sent = sent
	}
	if len(live) == 1 {
		// alone: a plain call under the caller's own context, the same as
		// without batching
		c := live[0]
		v, err := b.single(c.ctx, c.args)
		ln.back(sent, err == nil || IsErrorReply(err))
		c.finish(v, err)
		return
	}
	// the pipeline serves every caller in it: bounded by the store timeout
	// from its write (the client's socket deadlines, see scriptClient), not
	// cut short by one caller's cancellation or deadline (a caller that
	// leaves gets its own context's error)
	ctx, cancel := withCallTimeout(context.WithoutCancel(live[0].ctx), b.ctxTimeout)
	defer cancel()
	// preloading is an optimisation: if it fails (a node is down), EVALSHA
	// still runs where the script is cached and NOSCRIPT falls back to EVAL
	_ = ln.load(ctx)
	cmds := make([]*redis.Cmd, len(live))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range live {
			cmds[i] = b.script.cmd(ctx, c.args, false)
			_ = p.Process(ctx, noRetryCmd{cmds[i]})
		}
		return nil
	})
	var retry []*pendingCheck
	refreshed, answered := false, false
	for _, cmd := range cmds {
		if err := cmd.Err(); err == nil || IsErrorReply(err) || isNoScript(err) {
			answered = true
			break
		}
	}
	ln.back(sent, answered)
	for i, c := range live {
		v, err := cmds[i].Result()
		if err != nil && !refreshed {
			refreshTopology(b.client, err)
			refreshed = true
		}
		if isNoScript(err) {
			retry = append(retry, c) // not executed: safe to send again
			continue
		}
		c.finish(v, err)
	}
	if len(retry) == 0 {
		return
	}
	// the node lost its script cache (restart, failover, SCRIPT FLUSH): EVAL
	// runs and caches the script wherever each key lives, and the lane's
	// next batch preloads it on its master again
	ln.loadMu.Lock()
	ln.loaded = false
	ln.loadMu.Unlock()
	cmds = make([]*redis.Cmd, len(retry))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range retry {
			cmds[i] = b.script.cmd(ctx, c.args, true)
			_ = p.Process(ctx, noRetryCmd{cmds[i]})
		}
		return nil
	})
	for i, c := range retry {
		c.finish(cmds[i].Result())
	}
}

// single runs one call on its own, under the caller's context, the same as
// without batching.
func (b *Batcher) single(ctx context.Context, args []any) (any, error) {
	v, err := b.script.runWithin(ctx, b.client, args, b.ctxTimeout)
	if err != nil {
		refreshTopology(b.client, err)
	}
	return v, err
}

// load makes sure the lane's master has the script (the default lane of a
// Cluster: every master).
func (ln *lane) load(ctx context.Context) error {
	ln.loadMu.Lock()
	defer ln.loadMu.Unlock()
	if ln.loaded {
		return nil
	}
	b := ln.b
	var err error
	switch {
	case ln.node != nil:
		err = b.script.loadOn(ctx, ln.node)
	case b.cluster != nil:
		err = b.cluster.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return b.script.loadOn(ctx, n)
		})
	default:
		err = b.script.loadOn(ctx, b.client)
	}
	if err != nil {
		return err
	}
	ln.loaded = true
	return nil
}

// close refuses the lane's new checks.
func (ln *lane) close() {
	ln.mu.Lock()
	ln.closed = true
	ln.mu.Unlock()
}

// Close refuses new checks and waits for the batches in flight, which
// send the checks queued.
func (b *Batcher) Close() {
	// no lane is added from here on; a check that took a lane's lock
	// before it closed is queued or on the wire, counted by wg
	b.lanes.close((*lane).close)
	b.wg.Wait() // queued checks are sent by the batches in flight
}
