package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// direct sends one script call per check (batching off). Its connections
// are go-redis's pool; it hands out one slot per pooled connection itself,
// so that a wait for a connection is known to be this process's (shed,
// errConnWait, after localBudget(timeout)), never read as the store's
// silence. While every slot is busy, checks wait in a fair queue (round
// robin by tenant), and one tenant may have at most its share
// (defaultMaxPerTenant) waiting: a flood of one tenant is shed, other
// tenants' checks still reach Redis.
type direct struct {
	client     redis.UniversalClient
	timeout    time.Duration // a wait for a slot is bounded by localBudget of it
	ctxTimeout time.Duration // see batcher
	waiting    *tenantShares // checks waiting for a slot, by tenant

	mu    sync.Mutex
	free  atomic.Int32 // free slots; changed under mu, read without; -1: no bound
	queue fairQueue[*slotWaiter]
}

// slotWaiter is a check waiting for a slot: granted is closed when it gets
// one, unless it left first (state).
type slotWaiter struct {
	granted chan struct{}
	state   atomic.Int32 // queued, taken (granted) or abandoned
}

func newDirect(client redis.UniversalClient, timeout, ctxTimeout time.Duration) *direct {
	d := &direct{client: client, timeout: timeout, ctxTimeout: ctxTimeout,
		waiting: newTenantShares(defaultMaxPerTenant), queue: newFairQueue[*slotWaiter]()}
	size := -1
	switch c := client.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize // per node: a bound for the busiest one
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	d.free.Store(int32(size))
	return d
}

// do runs the script for one check of tenant and returns its answer and
// when its command was sent, or a shedError, or the caller's context's
// error.
func (d *direct) do(ctx context.Context, tenant string, args []any) (any, time.Time, error) {
	if d.free.Load() >= 0 {
		if err := d.acquire(ctx, tenant); err != nil {
			return nil, time.Time{}, err
		}
		defer d.release()
	}
	wrote := time.Now()
	call, cancel := withCallTimeout(ctx, d.ctxTimeout)
	defer cancel()
	v, err := runScript(call, d.client, args)
	return v, wrote, err
}

// acquire takes a slot: at once when one is free and nobody waits, else in
// the fair queue, within the local budget, while tenant holds less than its
// share of the waiting checks (checked without the lock first, so that a
// flood of refused checks never queues on mu).
func (d *direct) acquire(ctx context.Context, tenant string) error {
	held := false
	if d.free.Load() == 0 {
		if !d.waiting.take(tenant) {
			return errTenantShare
		}
		held = true
	}
	d.mu.Lock()
	if d.free.Load() > 0 && d.queue.n == 0 {
		d.free.Add(-1)
		d.mu.Unlock()
		if held {
			d.waiting.leave(tenant)
		}
		return nil
	}
	if !held && !d.waiting.take(tenant) {
		d.mu.Unlock()
		return errTenantShare
	}
	w := &slotWaiter{granted: make(chan struct{})}
	d.queue.push(tenant, w)
	d.mu.Unlock()
	defer d.waiting.leave(tenant)
	t := time.NewTimer(localBudget(d.timeout))
	defer t.Stop()
	var err error
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errConnWait
	}
	if !w.state.CompareAndSwap(queued, abandoned) {
		d.release() // granted as it left: hand the slot on
	}
	return err
}

// release frees a slot: to the next waiter in the fair queue, if any.
func (d *direct) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w, ok := d.queue.pop(); ok; w, ok = d.queue.pop() {
		if w.state.CompareAndSwap(queued, taken) {
			close(w.granted)
			return
		}
	}
	d.free.Add(1)
}
