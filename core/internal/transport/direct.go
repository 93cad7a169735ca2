package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Direct sends one script call per check (batching off). Its connections
// are go-redis's pool; it hands out one slot per pooled connection itself,
// so that a wait for a connection is known to be this process's (shed,
// ErrConnWait, after LocalBudget(timeout)), never read as the store's
// silence. While every slot is busy, checks wait in a fair queue (round
// robin by tenant), and one tenant may have at most its share
// (defaultMaxPerTenant) waiting: a flood of one tenant is shed, other
// tenants' checks still reach Redis. On a Cluster each master has its
// slots and queue, as go-redis has a pool per node: a slow master's calls
// hold only its own connections, never another master's checks.
type Direct struct {
	client     redis.UniversalClient
	script     *Script
	timeout    time.Duration // a wait for a slot is bounded by localBudget of it
	ctxTimeout time.Duration // see batcher
	waiting    *tenantShares // checks waiting for a slot, by tenant
	one        slots         // the only slots, or on a Cluster those of checks whose master is not known
	slots      *masters[slots]
}

// slots are one pool's connections as Direct hands them out.
type slots struct {
	mu    sync.Mutex
	free  atomic.Int32 // free slots; changed under mu, read without; -1: no bound
	queue fairQueue[*slotWaiter]
}

// slotWaiter is a check waiting for a slot: granted receives once when it
// gets one, unless it left first (state).
type slotWaiter struct {
	granted chan struct{} // buffered: release sends exactly once, never blocks
	state   atomic.Int32  // queued, taken (granted) or abandoned
}

// slotWaiters recycles waiters with their channels. A waiter goes back only
// from a check that received its slot: one that left first may still be in
// the queue, or be granted as it leaves.
var slotWaiters = sync.Pool{New: func() any { return &slotWaiter{granted: make(chan struct{}, 1)} }}

// NewDirect returns a Direct sending script through client (see Client).
func NewDirect(client redis.UniversalClient, script *Script, timeout, ctxTimeout time.Duration) *Direct {
	d := &Direct{client: client, script: script, timeout: timeout, ctxTimeout: ctxTimeout,
		waiting: newTenantShares(defaultMaxPerTenant)}
	size := -1
	switch c := client.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize // per node: each master's slots
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	mk := func(*redis.Client) *slots {
		s := &slots{queue: newFairQueue[*slotWaiter]()}
		s.free.Store(int32(size))
		return s
	}
	d.one.queue = newFairQueue[*slotWaiter]()
	d.one.free.Store(int32(size))
	d.slots = newMasters(client, &d.one, mk)
	return d
}

// Do runs the script for one check of tenant and returns its answer and
// when its command was sent, or a shedError, or the caller's context's
// error.
func (d *Direct) Do(ctx context.Context, tenant string, args []any) (any, time.Time, error) {
	if s := d.slots.of(ctx, args); s.free.Load() >= 0 {
		if err := d.acquire(ctx, s, tenant); err != nil {
			return nil, time.Time{}, err
		}
		defer s.release()
	}
	wrote := time.Now()
	call, cancel := withCallTimeout(ctx, d.ctxTimeout)
	defer cancel()
	v, err := d.script.run(call, d.client, args)
	if err != nil {
		refreshTopology(d.client, err)
	}
	return v, wrote, err
}

// Close does nothing: a Direct holds no background work.
func (d *Direct) Close() {}

// acquire takes one of s's slots: at once when one is free and nobody
// waits, else in the fair queue, within the local budget, while tenant
// holds less than its share of the waiting checks (checked without the
// lock first, so that a flood of refused checks never queues on mu).
func (d *Direct) acquire(ctx context.Context, s *slots, tenant string) error {
	held := false
	if s.free.Load() == 0 {
		if !d.waiting.take(tenant) {
			return errTenantShare
		}
		held = true
	}
	s.mu.Lock()
	if s.free.Load() > 0 && s.queue.n == 0 {
		s.free.Add(-1)
		s.mu.Unlock()
		if held {
			d.waiting.leave(tenant)
		}
		return nil
	}
	if !held && !d.waiting.take(tenant) {
		s.mu.Unlock()
		return errTenantShare
	}
	w := slotWaiters.Get().(*slotWaiter)
	s.queue.push(tenant, w)
	s.mu.Unlock()
	defer d.waiting.leave(tenant)
	t := getTimer(LocalBudget(d.timeout))
	defer putTimer(t)
	var err error
	select {
	case <-w.granted:
		w.state.Store(queued)
		slotWaiters.Put(w)
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = ErrConnWait
	}
	if !w.state.CompareAndSwap(queued, abandoned) {
		s.release() // granted as it left: hand the slot on
	}
	return err
}

// release frees a slot: to the next waiter in the fair queue, if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, ok := s.queue.pop(); ok; w, ok = s.queue.pop() {
		if w.state.CompareAndSwap(queued, taken) {
			w.granted <- struct{}{}
			return
		}
	}
	s.free.Add(1)
}
