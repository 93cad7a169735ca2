// Package shard keeps what the limiter knows of each store shard: when it
// last answered a call, and its circuit breaker, which opens only on
// evidence that the shard is down (confirmed by a probe of its own).
package shard

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// Set keeps what the limiter knows of each store shard (one for a
// standalone or failover client, one per master on a Cluster, by the
// master's address from MasterForKey): when it last answered, and its
// circuit breaker, so that a dead master degrades only the tenants whose
// slots it holds. threshold 0: no breaker, the rest is kept.
type Set struct {
	threshold int64
	cooldown  time.Duration
	// probeTimeout bounds a confirmation probe (see Shard.Confirm): two
	// store timeouts, at least a second
	probeTimeout time.Duration
	client       redis.UniversalClient
	cluster      *redis.ClusterClient // nil: one shard
	now          func() time.Time     // the limiter's clock, for the breaker
	closed       atomic.Bool
	probes       sync.WaitGroup
	one          Shard    // the one shard, or a master not known yet
	byAddr       sync.Map // master address -> *Shard
	nshards      atomic.Int64
	metrics      Metrics
	okOpt        []metric.RecordOption
}

// Metrics are the store call instruments the breaker records, for it
// alone hears every call's outcome: the call's duration, by result (ok,
// error), and its failures, by kind and the limiter's failure Policy. A nil
// instrument is not recorded.
type Metrics struct {
	Durations metric.Float64Histogram
	Errors    metric.Int64Counter
	Policy    string
}

// maxShards bounds the shards kept for Cluster masters (addresses change
// with failovers): past it, new masters share the default one.
const maxShards = 1024

// New returns the Set for client c: breakers of threshold consecutive
// failures (0: none) and cooldown, probes of two timeouts (at least 1 s),
// the breaker on the limiter's clock now.
func New(threshold int, cooldown, timeout time.Duration, c redis.UniversalClient, now func() time.Time, m Metrics) *Set {
	bs := &Set{threshold: int64(threshold), cooldown: cooldown, probeTimeout: max(2*timeout, time.Second), client: c, now: now,
		metrics: m, okOpt: []metric.RecordOption{metric.WithAttributes(attribute.String("result", "ok"))}}
	bs.cluster, _ = c.(*redis.ClusterClient)
	bs.one.set, bs.one.node = bs, c
	if rc, ok := c.(*redis.Client); ok {
		bs.one.node = bs.probeClient(rc)
	}
	return bs
}

// probeClient is a client of one connection to c's server, for
// confirmation probes alone: a probe never waits behind the checks for a
// pooled connection, and its socket deadlines (probeTimeout, set when it
// writes and when it reads) measure the server, not this process, so its
// silence is the server's.
func (bs *Set) probeClient(c *redis.Client) *redis.Client {
	o := *c.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolTimeout = bs.probeTimeout, bs.probeTimeout, bs.probeTimeout, bs.probeTimeout
	o.DialerRetries, o.MaxRetries = 1, -1 // one PING, one dial: a retried probe would wait its deadline again
	return redis.NewClient(&o)
}

// probeBackstop bounds a probe's context: far past its socket deadlines,
// it fires only when this process cannot run for seconds.
const probeBackstop = 5 * time.Second

// Close waits for the probes running and closes their clients.
func (bs *Set) Close() {
	bs.closed.Store(true)
	bs.probes.Wait()
	closeProbe(bs.one.node)
	bs.byAddr.Range(func(_, v any) bool {
		closeProbe(v.(*Shard).node)
		return true
	})
}

func closeProbe(c redis.Cmdable) {
	if pc, ok := c.(*redis.Client); ok {
		_ = pc.Close()
	}
}

// ForKey returns the shard that holds key.
func (bs *Set) ForKey(ctx context.Context, key string) *Shard {
	if bs.cluster == nil {
		return &bs.one
	}
	// the slot map is cached; a lookup that must load it is bounded by the
	// script client's own dial and read timeouts (transport.Client)
	m, err := bs.cluster.MasterForKey(ctx, key)
	if err != nil {
		return &bs.one
	}
	addr := m.Options().Addr
	if b, ok := bs.byAddr.Load(addr); ok {
		return b.(*Shard)
	}
	if bs.nshards.Load() >= maxShards {
		return &bs.one
	}
	fresh := &Shard{set: bs, node: bs.probeClient(m)}
	b, loaded := bs.byAddr.LoadOrStore(addr, fresh)
	if loaded {
		closeProbe(fresh.node)
	} else {
		bs.nshards.Add(1)
	}
	return b.(*Shard)
}

// Shard is one store shard: when it last answered, and its
// consecutive-failure circuit breaker. Lock-free: it sits on every check's
// path.
//
// The breaker opens only on evidence that the shard is down: a transport
// error, a server-wide error reply, or a check without a reply in time
// while the shard answered nothing else since it was sent and a
// confirmation probe (PING, bounded by probeTimeout) got no answer either.
// A reply to any other command after this one was sent, or to the probe,
// proves the shard alive: the timeout was this process's (CPU starvation,
// a slow read), not the store's, and the check is shed, not degraded.
type Shard struct {
	set       *Set
	node      redis.Cmdable // where a probe goes: a client of its own (probeClient)
	failures  atomic.Int64
	openUntil atomic.Int64 // unix nanos; 0 = closed
	probing   atomic.Bool
	answered  atomic.Int64 // unix nanos: when the latest call the shard answered was sent
	// downUntil: a probe found the shard silent (unix nanos; MaxInt64: until
	// it answers again): a check without a reply is then evidence
	downUntil atomic.Int64
	probe     atomic.Pointer[chan struct{}] // the probe running, closed when it ends; nil: none
}

// KnownDown reports whether a probe found the shard silent and it has not
// answered since.
func (b *Shard) KnownDown(now time.Time) bool {
	return now.UnixNano() < b.downUntil.Load()
}

// Confirm asks the shard whether it is up, and returns when it knows or
// ctx ends: a PING bounded by probeTimeout, one at a time (checks that ask
// while one runs wait for it). An answer is a success (the shard is alive);
// none means the shard is down: the breaker opens, and checks without a
// reply are answered by the failure policy until the shard answers again;
// unless a check sent after the probe was answered meanwhile, or the probe
// could not be run on time (see silent): no evidence, the checks are shed.
func (b *Shard) Confirm(ctx context.Context) {
	done := make(chan struct{})
	if !b.probe.CompareAndSwap(nil, &done) {
		if p := b.probe.Load(); p != nil {
			select {
			case <-*p:
			case <-ctx.Done():
			}
		}
		return
	}
	if b.set.closed.Load() {
		b.probe.Store(nil)
		close(done)
		return
	}
	b.set.probes.Go(func() {
		defer func() {
			b.probe.Store(nil)
			close(done)
		}()
		if !b.silent() {
			return
		}
		b.downUntil.Store(math.MaxInt64) // until the shard answers again (Success)
		if b.set.threshold > 0 {
			b.openUntil.Store(b.set.now().Add(b.set.cooldown).UnixNano())
		}
	})
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// silent PINGs the shard and reports whether its silence is evidence: no
// answer to a PING made while this process ran on time. A failure is no
// evidence when this process fell behind by half the probe's deadline or
// more (stopped, or starved of CPU: its goroutines waited in the run
// queue), which a lagMeter beside the PING measures, or when it came
// later than the probe's deadline by more than half of it: the deadline
// may have passed while a reply (or the dial's completion) waited unread. The PING
// is then made once more, and a second failure of that kind is no evidence
// either way (the checks are shed). An answer to the PING, or to a check
// sent after it, proves the shard alive.
func (b *Shard) silent() bool {
	for range 2 {
		pctx, cancel := context.WithTimeout(context.Background(), probeBackstop)
		lag := startLagMeter(b.set.probeTimeout / 20)
		sent := time.Now()
		err := b.node.Ping(pctx).Err()
		behind := lag.stop()
		cancel()
		if err == nil {
			b.Success(sent)
			return false
		}
		if b.AnsweredSince(sent) {
			return false // the shard answered a check sent meanwhile: it is up
		}
		if behind < b.set.probeTimeout/2 && time.Since(sent) <= b.set.probeTimeout+b.set.probeTimeout/2 {
			return true // the deadline passed while this process ran: the shard was silent
		}
	}
	return false
}

// lagMeter measures how far this process fell behind while a probe
// waits: a goroutine that sleeps step at a time and adds up by how much its
// sleeps overran (the time it waited in the run queue to be run again, or
// the process was stopped). The probe's own goroutine waits in the same
// queue at each step of its dial, write and read: when the meter fell
// behind by half the probe's deadline, so may the probe have, with its
// reply waiting. A short stall alone is no reason to doubt the probe: a
// reply that came meanwhile is read when the process runs again, within
// the deadline. It runs only while a probe does.
type lagMeter struct {
	step  time.Duration
	last  time.Time     // when the latest sleep began
	total time.Duration // the overruns so far
	done  chan struct{}
	ended chan struct{} // closed when the goroutine has left: last and total are then the caller's

}

func startLagMeter(step time.Duration) *lagMeter {
	m := &lagMeter{step: step, done: make(chan struct{}), ended: make(chan struct{})}
	m.last = time.Now()
	go func() {
		defer close(m.ended)
		t := time.NewTimer(step)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
			}
			now := time.Now()
			m.note(now.Sub(m.last))
			m.last = now
			t.Reset(step)
		}
	}()
	return m
}

func (m *lagMeter) note(slept time.Duration) {
	m.total += max(0, slept-m.step)
}

// stop ends the meter and returns the overruns in all, counting the sleep
// under way (the probe's goroutine may run before the meter's, after both
// were held up).
func (m *lagMeter) stop() time.Duration {
	close(m.done)
	<-m.ended
	m.note(time.Since(m.last))
	return m.total
}

// Allow reports whether a store call may be made now: always when closed;
// when open, only one probe after the cool-down (probe is then true). now
// comes from the limiter's clock, the same as failure's: the breaker reads
// no other clock.
func (b *Shard) Allow(now time.Time) (ok, probe bool) {
	if b.set.threshold == 0 {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now.UnixNano() < until {
		return false, false
	}
	ok = b.probing.CompareAndSwap(false, true)
	return ok, ok
}

// Abandon ends a call that says nothing about the store (its caller left
// first, or the check was shed): when it was the probe, the next call
// probes instead.
func (b *Shard) Abandon(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

// Success closes the circuit. sent is when the answered call was sent
// (wall clock).
func (b *Shard) Success(sent time.Time) {
	if n := sent.UnixNano(); b.answered.Load() < n {
		b.answered.Store(n)
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.downUntil.Load() != 0 {
		b.downUntil.Store(0)
	}
	if b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.probing.Store(false)
	}
}

// AnsweredSince reports whether the shard answered a call sent after sent
// (wall clock): it processed newer commands, so a call sent at sent that got
// no reply in time is no evidence that it is down.
func (b *Shard) AnsweredSince(sent time.Time) bool {
	return b.answered.Load() > sent.UnixNano()
}

// Failure counts a failed call (a transport failure, a server-wide error
// reply, or a timeout with no reply from the shard since; never a caller's,
// never a shed check's, never an error reply about one request) and opens
// the circuit at the threshold (or re-opens it after a failed probe). It
// reports whether the circuit opened. now is the limiter's clock.
func (b *Shard) Failure(now time.Time) bool {
	if b.set.threshold == 0 {
		return false
	}
	n := b.failures.Add(1)
	if n >= b.set.threshold || b.probing.Load() {
		b.openUntil.Store(now.Add(b.set.cooldown).UnixNano())
		b.probing.Store(false)
		return true
	}
	return false
}

// ErrCircuitOpen is the store error of a check made while its shard's
// circuit is open: the store was not called.
var ErrCircuitOpen = errors.New("circuit breaker open: store not called")

// Outcome is what a store call told of its shard, as its breaker judged it.
type Outcome uint8

// Outcomes of a store call (see Call.End).
const (
	// Answered: the shard answered; the decision is the store's.
	Answered Outcome = iota
	// Gone: the caller left first; the check is abandoned, nothing is
	// counted.
	Gone
	// Shed: this process could not make the check in time (the error is a
	// *transport.ShedError); the store is not at fault.
	Shed
	// Refused: the store refused this request alone (an error reply about
	// its keys); answered without the store, but the shard is alive.
	Refused
	// Failed: the store failed; counted by the breaker.
	Failed
	// Opened: the store failed, and this failure opened the circuit.
	Opened
)

// Call is one store call through a shard's breaker: Begin it, make the
// call, End it with the call's error.
type Call struct {
	shard *Shard
	probe bool // the call is the breaker's probe
	// Start is when the call began (wall clock), for its duration
	Start time.Time
}

// Begin starts a store call for key: ErrCircuitOpen when the key's shard
// is open. now is the limiter's clock. The Call is a value, kept by its
// caller: one check's, never allocated.
func (bs *Set) Begin(ctx context.Context, key string, now time.Time) (Call, error) {
	sh := bs.ForKey(ctx, key)
	ok, probe := sh.Allow(now)
	if !ok {
		bs.record(ctx, 0, ErrCircuitOpen)
		return Call{}, ErrCircuitOpen
	}
	return Call{shard: sh, probe: probe, Start: time.Now()}, nil
}

// End settles the call on its shard's breaker and says what its error
// (nil: answered) was. wrote is when its command was handed to the
// connection (zero when it never was). A caller gone is no failure. A
// check this process could not send in time, or whose reply came late
// while the shard kept answering other checks (asked once by a probe when
// nothing else tells), is shed: the returned error is then a
// *transport.ShedError. A request's own failure is a success for the
// breaker. Only the store's own failures count.
func (c *Call) End(ctx context.Context, err error, wrote time.Time) (Outcome, error) {
	sh := c.shard
	if err == nil {
		sh.Success(wrote)
		sh.set.record(ctx, time.Since(c.Start), nil)
		return Answered, nil
	}
	var gone *transport.CallerGone
	if errors.As(err, &gone) {
		sh.Abandon(c.probe)
		return Gone, err
	}
	var late *transport.ReplyTimeout
	if errors.As(err, &late) || errors.Is(err, transport.ErrStalled) {
		if !sh.KnownDown(time.Now()) && !(late != nil && sh.AnsweredSince(wrote)) {
			sh.Confirm(ctx) // ask the store itself, once for every check that asks meanwhile
			if ctx.Err() != nil {
				sh.Abandon(c.probe)
				return Gone, &transport.CallerGone{Err: ctx.Err()}
			}
		}
		if !sh.KnownDown(time.Now()) {
			err = &transport.ShedError{Cause: "late_reply", Why: "no reply within the timeout, while the store answered others: " + err.Error()}
		}
	}
	var shed *transport.ShedError
	if errors.As(err, &shed) {
		sh.Abandon(c.probe)
		return Shed, shed
	}
	sh.set.record(ctx, time.Since(c.Start), err)
	var re *transport.RequestError
	if errors.As(err, &re) {
		sh.Success(wrote)
		return Refused, err
	}
	if sh.Failure(sh.set.now()) {
		return Opened, err
	}
	return Failed, err
}

// record records a store call that took took and failed with err (nil:
// answered; ErrCircuitOpen: not made, no duration).
func (bs *Set) record(ctx context.Context, took time.Duration, err error) {
	m := bs.metrics
	switch {
	case err == nil:
		if m.Durations != nil {
			m.Durations.Record(ctx, took.Seconds(), bs.okOpt...)
		}
		return
	case m.Errors != nil:
		m.Errors.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", ErrorKind(err)), attribute.String("policy", m.Policy)))
	}
	if m.Durations != nil && !errors.Is(err, ErrCircuitOpen) {
		m.Durations.Record(ctx, took.Seconds(), metric.WithAttributes(attribute.String("result", "error")))
	}
}

// ErrorKind classifies a store failure for the errors metric.
func ErrorKind(err error) string {
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, ErrCircuitOpen):
		return "circuit_open"
	case errors.As(err, new(*transport.RequestError)):
		return "request"
	case errors.Is(err, transport.ErrStalled):
		return "stalled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM"):
		return "oom"
	case errors.As(err, &ne), errors.Is(err, redis.ErrClosed), strings.Contains(err.Error(), "connection"), strings.Contains(err.Error(), "EOF"):
		return "connection"
	}
	return "other"
}
