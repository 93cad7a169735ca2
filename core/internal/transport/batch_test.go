package transport

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedRedis is a client of the Redis at REDIS_URL (127.0.0.1:6379 by
// default); the script below writes no key.
func sharedRedis(t *testing.T) *redis.Client {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Redis at %s: %v", u, err)
		}
		t.Skipf("no Redis at %s: %v", u, err)
	}
	return c
}

// TestStaleQueueLeadsAPipeline: while a lane's two pipelines' leaders do
// not come back (a starved process; here the lane is told two are on the
// wire that never return), a check queues; once the queue has not moved
// for half the local budget, the next check leads a pipeline of its own
// with the queued check in it, and both are answered by Redis. With
// maxInflight pipelines on the wire the queue is never stale: a check
// queues however long the queue has waited.
func TestStaleQueueLeadsAPipeline(t *testing.T) {
	c := sharedRedis(t)
	const timeout = 100 * time.Millisecond
	b := NewBatcher(c, NewScript("return ARGV[1]"), timeout, time.Second, nil)
	defer b.Close()
	ln := &b.one
	ln.active.Add(int32(b.inflight)) // the leaders that never come back
	line := func(v string) []any { return []any{"evalsha", b.script.sha, 0, v} }
	ctx := context.Background()
	var wg sync.WaitGroup
	var queuedV any
	var queuedErr error
	wg.Go(func() { queuedV, _, queuedErr = b.Do(ctx, "calm", line("queued")) })
	waitFor(t, func() bool { ln.mu.Lock(); defer ln.mu.Unlock(); return ln.pending.n == 1 })
	ln.mu.Lock()
	if ln.stale(b) {
		ln.mu.Unlock()
		t.Fatal("a queue that has just begun is stale")
	}
	ln.since -= int64(LocalBudget(timeout) / 2) // as if it had waited half its budget
	ln.mu.Unlock()
	v, _, err := b.Do(ctx, "other", line("leader"))
	wg.Wait()
	if err != nil || v != "leader" || queuedErr != nil || queuedV != "queued" {
		t.Fatalf("the check that found the queue stale: %v, %v; the queued one: %v, %v; want both answered", v, err, queuedV, queuedErr)
	}
	if n := ln.active.Load(); n != int32(b.inflight) {
		t.Fatalf("%d pipelines on the wire after the extra one came back, want the %d that never return", n, b.inflight)
	}

	ln.active.Store(maxInflight)
	ln.mu.Lock()
	ln.pending.push("calm", &pendingCheck{done: make(chan struct{}, 1)})
	ln.since = time.Now().Add(-LocalBudget(timeout)).UnixNano()
	stale := ln.stale(b)
	ln.pending = newFairQueue[*pendingCheck]()
	ln.mu.Unlock()
	ln.active.Store(0)
	if stale {
		t.Fatalf("with %d pipelines on the wire the queue is stale: a check would lead one more", maxInflight)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out waiting")
}

// TestJudgeWaitAsksTheNextBatchBack: a check that waited out its budget in
// the queue, with no batch sent after it answered yet, is judged by the
// lane's next batch to come back: shed (errQueueWait) when that batch
// brought a reply, ErrStalled when it brought none. A batch that comes back
// with no such check waiting allocates nothing.
func TestJudgeWaitAsksTheNextBatchBack(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialed
	defer c.Close()
	b := NewBatcher(c, NewScript("return 1"), 5*time.Second, time.Second, nil)
	defer b.Close()
	ln := &b.one
	if n := testing.AllocsPerRun(100, func() { ln.back(time.Now(), true) }); n != 0 {
		t.Fatalf("a batch coming back with no check waiting allocates %v times, want 0", n)
	}
	for _, answered := range []bool{true, false} {
		queued := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- ln.judgeWait(context.Background(), queued) }()
		waitFor(t, func() bool { return ln.next.Load() != nil })
		ln.back(queued.Add(-time.Second), answered) // sent before the check queued
		want := error(errQueueWait)
		if !answered {
			want = ErrStalled
		}
		select {
		case err := <-errc:
			if err != want {
				t.Fatalf("next batch back answered=%v: judged %v, want %v", answered, err, want)
			}
		case <-time.After(LocalBudget(b.timeout)): // past the judge's own bound
			t.Fatalf("next batch back answered=%v: the waiting check was not judged", answered)
		}
	}
}
