package slots

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate-go/tollgate/core/internal/scriptcall"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// MaxBatch bounds one pipeline of slot removals.
const MaxBatch = 256

// Forgets frees the slots of checks whose answer was not delivered (a
// timeout, a late reply, a caller gone: the failure policy, a shed or a
// cancellation answered it): the store may have run the check's script, or
// may run it later, from a connection the process gave up on. Each is
// forgotten by the concurrency script's Forget (see its header), which
// removes the slot if it was taken and otherwise leaves a tombstone that
// stops the take: either order frees it. The pending ones are sent in one
// pipeline by a background worker, and retried with back-off (as releases
// are) until the store answers each or its lease from the check has run
// out; one given up is counted as a release that failed.
type Forgets struct {
	client  redis.UniversalClient
	script  *transport.Script
	timeout time.Duration
	lease   time.Duration
	// leaseMicros and ttl are the lease's script arguments
	leaseMicros, ttl string
	clock            func() time.Time // the script's clock; nil: the server's
	hooks            Hooks

	mu      sync.Mutex
	pending []forget
	running bool
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
	// wake tells a worker waiting out a back-off that a new forget came:
	// a new one is sent at once (with the ones being retried), as a
	// release is
	wake chan struct{}
}

// Hooks are what Forgets reports to: the metrics and the log.
type Hooks struct {
	// Labels is the label set of the slot metrics of a slot of c in bucket.
	Labels func(c stack.Call, bucket string) metric.AddOption
	// Expired counts a slot left to expire in the store, by cause.
	Expired func(labels metric.AddOption, cause string)
	// Log logs a forget that failed (at most once a second).
	Log func(msg string, err error, attrs ...any)
}

type forget struct {
	key, id string
	until   time.Time // retried until then: the lease from the check
	labels  metric.AddOption
}

// NewForgets returns the forgets of slots taken by script (the
// concurrency script) on client, each attempt bounded by timeout, retried
// within lease; clock is the script's clock (nil: the server's).
func NewForgets(client redis.UniversalClient, script *transport.Script, timeout, lease time.Duration, clock func() time.Time, h Hooks) *Forgets {
	micros, ttl := scriptcall.SlotArgs(lease)
	return &Forgets{client: client, script: script, timeout: timeout, lease: lease, leaseMicros: micros, ttl: ttl,
		clock: clock, hooks: h, closing: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// Forget forgets the slot of c's check.
func (fs *Forgets) Forget(c stack.Call) {
	f := forget{key: c.Slot.Key, id: c.Slot.ID, until: time.Now().Add(fs.lease),
		labels: fs.hooks.Labels(c, c.Buckets[c.Slot.Index].Name)}
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
	if fs.closed {
		// the limiter is closing: one attempt, now
		batch := fs.pending
		fs.pending = nil
		fs.mu.Unlock()
		fs.giveUp(fs.send(batch))
		return
	}
	fs.running = true
	fs.wg.Add(1)
	fs.mu.Unlock()
	go fs.loop()
}

// Close makes the worker try each pending forget once more, and waits for
// it; a forget after Close is tried once, at once.
func (fs *Forgets) Close() {
	fs.mu.Lock()
	if !fs.closed {
		fs.closed = true
		close(fs.closing)
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

// loop sends the pending forgets until none is left, retrying the failed
// ones with back-off within their leases (a new forget ends the wait);
// once the limiter closes, each is tried once more.
func (fs *Forgets) loop() {
	defer fs.wg.Done()
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
		failed := fs.send(batch)
		if closing {
			fs.giveUp(failed)
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
				fs.giveUp([]forget{f})
			}
		}
		fs.mu.Lock()
		fs.pending = append(keep, fs.pending...)
		fs.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
			backoff = min(2*backoff, time.Second)
		case <-fs.wake:
			t.Stop()
		case <-fs.closing:
			t.Stop()
			closing = true
		}
	}
}

// giveUp counts forgets that never reached the store: their slots, if the
// store takes them, expire at their deadline.
func (fs *Forgets) giveUp(failed []forget) {
	for _, f := range failed {
		fs.hooks.Expired(f.labels, "release_failed")
	}
}

// send runs batch's forgets, pipelined (MaxBatch to a round trip, each
// bounded by the store timeout), and returns those the store did not
// answer. After a round trip the store answered none of, the rest wait for
// the next attempt: an outage costs one timeout per attempt, not one per
// round trip.
func (fs *Forgets) send(batch []forget) (failed []forget) {
	now := ""
	if fs.clock != nil {
		now = strconv.FormatInt(fs.clock().UnixMicro(), 10)
	}
	for len(batch) > 0 {
		part := batch[:min(len(batch), MaxBatch)]
		batch = batch[len(part):]
		lines := make([][]any, len(part))
		for i, f := range part {
			lines[i] = fs.script.Line([]string{f.key}, now, f.id, fs.leaseMicros, fs.ttl, "forget")
		}
		ctx, cancel := context.WithTimeout(context.Background(), fs.timeout)
		cmds := make([]*redis.Cmd, len(part))
		_, _ = fs.client.Pipelined(ctx, func(p redis.Pipeliner) error {
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
				_, err = fs.script.Run(ctx, fs.client, lines[i])
			}
			if err != nil {
				fs.hooks.Log("tollgate: the concurrency slot of an unanswered check could not be freed; retrying within its lease", err, "key", f.key)
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
