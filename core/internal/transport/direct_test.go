package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDirectWaiterGrantedOrGone: with every connection slot taken, a check
// waits in the queue; a slot freed goes to it, and it is answered by Redis,
// each time (the waiters are recycled). A check whose caller leaves while
// it waits gets its context's error, and the slot freed after it is not
// lost on it: it goes back to the free slots.
func TestDirectWaiterGrantedOrGone(t *testing.T) {
	c := sharedRedis(t)
	const timeout = 2 * time.Second // a wait's budget: LocalBudget(timeout)
	d := NewDirect(c, NewScript("return ARGV[1]"), timeout, time.Minute)
	s := &d.one
	s.free.Store(0) // every slot taken
	line := func(v string) []any { return []any{"evalsha", d.script.sha, 0, v} }
	queuedOne := func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.queue.n == 1 }
	for i := range 3 {
		type answer struct {
			v   any
			err error
		}
		got := make(chan answer, 1)
		go func() {
			v, _, err := d.Do(context.Background(), "t", line("granted"))
			got <- answer{v, err}
		}()
		waitFor(t, queuedOne)
		s.release() // the slot goes to the waiter, which gives it back when done
		a := <-got  // bounded: the waiter's budget, then the store timeout
		if a.err != nil || a.v != "granted" {
			t.Fatalf("round %d: granted check answered %v, %v; want Redis's reply", i, a.v, a.err)
		}
		if n := s.free.Load(); n != 1 {
			t.Fatalf("round %d: %d free slots after the granted check finished, want 1", i, n)
		}
		s.free.Store(0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := d.Do(ctx, "t", line("gone"))
		errc <- err
	}()
	waitFor(t, queuedOne)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a check whose caller left while it waited: %v, want context.Canceled", err)
	}
	s.release()
	if n := s.free.Load(); n != 1 {
		t.Fatalf("%d free slots after a slot was freed past a gone waiter, want 1", n)
	}
}
