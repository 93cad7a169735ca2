package core

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces concurrent checks into pipelined round trips, without a
// dispatcher goroutine and without lingering. A check that finds fewer than
// inflight batches on the wire sends at once, itself, together with whatever
// is queued (at low concurrency this is a plain call: no hand-off, no added
// latency). A check that finds every slot busy queues; when a batch comes
// back, the queue goes out as the next batch. So batches grow exactly as
// fast as Redis answers.
//
// Every command in a pipeline is EVALSHA. The script is loaded on every
// master before the first batch, and again when a reply says NOSCRIPT (a
// restart, failover or SCRIPT FLUSH): a NOSCRIPT command was not executed, so
// only those are sent again. A command that timed out or lost its connection
// is never replayed: every script command is a noRetryCmd, so go-redis does
// not resend it or the pipeline holding it, whatever MaxRetries says.
//
// The queue is bounded (maxPending): a check that finds it full is not
// queued and fails as a store failure (errQueueFull), counted in the store
// errors metric. The client is bounded by the limiter's timeout (see
// scriptClient), so the leader always sends inline: no goroutine per check.
type batcher struct {
	client     redis.UniversalClient
	maxBatch   int
	inflight   int
	maxPending int
	sizes      func(n int) // batch-size observer (metrics)

	mu      sync.Mutex
	active  int
	pending []*call
	closed  bool
	wg      sync.WaitGroup

	loadMu sync.Mutex
	loaded bool
}

type call struct {
	ctx  context.Context
	args []any // the whole EVALSHA command line, see scriptArgs
	v    any
	err  error
	done chan struct{} // buffered: finish sends exactly once, never blocks
}

// calls recycles call records with their channels. A record goes back only
// from a caller that received its answer: one whose context ended first
// leaves it to the batch that still holds it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// result takes the answer of a finished call and recycles the record.
func (c *call) result() (any, error) {
	v, err := c.v, c.err
	*c = call{done: c.done}
	calls.Put(c)
	return v, err
}

const (
	defaultMaxBatch   = 128
	defaultInflight   = 2
	defaultMaxPending = 16 * defaultMaxBatch
)

func newBatcher(client redis.UniversalClient, sizes func(int)) *batcher {
	return &batcher{client: client, maxBatch: defaultMaxBatch, inflight: defaultInflight,
		maxPending: defaultMaxPending, sizes: sizes}
}

var (
	errClosed    = errors.New("limiter closed")
	errQueueFull = errors.New("too many checks waiting for the store")
)

// do runs the script for one check through the batcher and waits for its
// answer or ctx's end, whichever comes first.
func (b *batcher) do(ctx context.Context, args []any) (any, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if b.active < b.inflight && len(b.pending) == 0 {
		// alone (low concurrency): a plain call, inline, with nothing to
		// hand over, so that one caller pays nothing for the batcher
		b.active++
		b.wg.Add(1)
		b.mu.Unlock()
		if b.sizes != nil {
			b.sizes(1)
		}
		var v any
		var err error
		if err = ctx.Err(); err == nil {
			v, err = b.single(ctx, args)
		}
		b.handOff()
		return v, err
	}
	if b.active >= b.inflight && len(b.pending) >= b.maxPending {
		b.mu.Unlock()
		return nil, errQueueFull
	}
	c := calls.Get().(*call)
	c.ctx, c.args = ctx, args
	if b.active >= b.inflight {
		b.pending = append(b.pending, c)
		b.mu.Unlock()
		return c.wait(ctx)
	}
	b.active++
	batch := b.take(c)
	b.wg.Add(1)
	b.mu.Unlock()
	b.lead(batch)
	<-c.done // finished by the batch just sent
	return c.result()
}

// wait returns c's answer, or ctx's error when it ends first.
func (c *call) wait(ctx context.Context) (any, error) {
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// take returns first plus up to maxBatch-1 queued calls. Callers hold mu.
func (b *batcher) take(first *call) []*call {
	n := min(len(b.pending), b.maxBatch-1)
	batch := make([]*call, 0, n+1)
	batch = append(batch, first)
	batch = append(batch, b.pending[:n]...)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil
	}
	return batch
}

func (c *call) finish(v any, err error) {
	c.v, c.err = v, err
	c.done <- struct{}{}
}

// lead sends batch, then hands what queued meanwhile to a new leader, or
// frees its slot.
func (b *batcher) lead(batch []*call) {
	b.send(batch)
	b.handOff()
}

// handOff, after a batch came back, sends what queued meanwhile as the next
// batch from a new leader, or frees the slot.
func (b *batcher) handOff() {
	defer b.wg.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.active--
		return
	}
	first := b.pending[0]
	b.pending = b.pending[1:]
	next := b.take(first)
	b.wg.Add(1)
	go b.lead(next)
}

// send runs one batch as a pipeline and hands each caller its reply.
func (b *batcher) send(batch []*call) {
	if b.sizes != nil {
		b.sizes(len(batch))
	}
	// calls whose caller already gave up are not sent
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
	if len(live) == 1 {
		// alone (low concurrency): a plain call under the caller's own
		// context, the same as without batching, so that one caller pays
		// nothing for the batcher
		c := live[0]
		c.finish(b.single(c.ctx, c.args))
		return
	}
	// the pipeline serves every caller in it: bounded by the latest of
	// their deadlines, not cut short by one caller's cancellation
	deadline, ok := live[0].ctx.Deadline()
	for _, c := range live[1:] {
		if d, ok2 := c.ctx.Deadline(); ok && ok2 && d.After(deadline) {
			deadline = d
		} else if !ok2 {
			ok = false
		}
	}
	ctx := context.WithoutCancel(live[0].ctx)
	if ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// preloading is an optimisation: if it fails (a node is down), EVALSHA
	// still runs where the script is cached and NOSCRIPT falls back to EVAL
	_ = b.load(ctx)
	cmds := make([]*redis.Cmd, len(live))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range live {
			cmds[i] = scriptCmd(ctx, c.args, false)
			_ = p.Process(ctx, noRetryCmd{cmds[i]})
		}
		return nil
	})
	var retry []*call
	refreshed := false
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
	// runs and caches the script wherever each key lives, and the next batch
	// preloads it on every master again
	b.loadMu.Lock()
	b.loaded = false
	b.loadMu.Unlock()
	cmds = make([]*redis.Cmd, len(retry))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range retry {
			cmds[i] = scriptCmd(ctx, c.args, true)
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
func (b *batcher) single(ctx context.Context, args []any) (any, error) {
	v, err := runScript(ctx, b.client, args)
	if err != nil {
		refreshTopology(b.client, err)
	}
	return v, err
}

// load makes sure every master has the script.
func (b *batcher) load(ctx context.Context) error {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
	if b.loaded {
		return nil
	}
	var err error
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.ScriptLoad(ctx, tokenBucketSource).Err()
		})
	} else {
		err = b.client.ScriptLoad(ctx, tokenBucketSource).Err()
	}
	if err != nil {
		return err
	}
	b.loaded = true
	return nil
}

func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait() // queued calls are sent by the batches in flight
}
