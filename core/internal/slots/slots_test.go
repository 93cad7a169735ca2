package slots

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate-go/tollgate/core/internal/scriptcall"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// store is a layer below that answers r and err, keeping the calls.
type store struct {
	r     stack.Result
	err   error
	calls []stack.Call
}

func (s *store) Decide(_ context.Context, c stack.Call) (stack.Result, error) {
	s.calls = append(s.calls, c)
	return s.r, s.err
}

// A slot call goes down named (a fresh id, with the group's prefix); an
// admission that took a slot comes back up with it, a peek's without; a
// denial for want of a slot waits at most the retry bound; a call without
// a slot passes through as it came.
func TestLayerNamesAndHandsUpTheSlot(t *testing.T) {
	b := []quota.Bucket{{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 1, Concurrency: 2}}}
	c := stack.Call{Cost: 1, Charge: 1, Keys: []string{"rl:{a}:default"}, Buckets: b, Slot: stack.Slot{Key: "rl:{a}:default:slots"}}
	s := &store{r: stack.Result{Verdict: stack.OK}}
	l := NewLayer("g", time.Second, nil, s)
	ctx := context.Background()
	r, err := l.Decide(ctx, c)
	id := s.calls[0].Slot.ID
	if err != nil || !strings.HasPrefix(id, "g/") || r.Slot != s.calls[0].Slot {
		t.Fatalf("an admission: slot %+v sent with id %q, err %v; want the slot sent, named in group g, handed up", r.Slot, id, err)
	}
	_, _ = l.Decide(ctx, c)
	if s.calls[1].Slot.ID == id {
		t.Fatalf("two calls named one slot %q", id)
	}
	peek := c
	peek.Cost, peek.Charge = 0, 0
	r, _ = l.Decide(ctx, peek)
	if r.Slot.Key != "" {
		t.Fatalf("a peek was handed a slot: %+v", r.Slot)
	}
	s.r = stack.Result{Verdict: stack.ConcurrencyLimit, Retry: time.Minute}
	r, _ = l.Decide(ctx, c)
	if r.Retry != time.Second || r.Slot.Key != "" {
		t.Fatalf("a denial for want of a slot: retry %v, slot %+v; want 1 s, none", r.Retry, r.Slot)
	}
	plain := c
	plain.Slot = stack.Slot{}
	_, _ = l.Decide(ctx, plain)
	if s.calls[len(s.calls)-1].Slot != (stack.Slot{}) {
		t.Fatalf("a call without a slot went down with one: %+v", s.calls[len(s.calls)-1].Slot)
	}
}

// The slot of a check whose script call may have run, unanswered, is
// forgotten: tried, and retried within its lease, until the store answers;
// one the store never answers is counted as expired when the forgets
// close. A call that certainly never ran (shed) is not forgotten.
func TestLayerForgetsUnansweredSlots(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // refused: every forget fails
	defer client.Close()
	var mu sync.Mutex
	var expired []string
	fs := NewForgets(client, scriptcall.Concurrency, 100*time.Millisecond, time.Minute, nil, Hooks{
		Labels: func(stack.Call, string) metric.AddOption { return metric.WithAttributes() },
		Expired: func(_ metric.AddOption, cause string) {
			mu.Lock()
			expired = append(expired, cause)
			mu.Unlock()
		},
		Log: func(string, error, ...any) {},
	})
	b := []quota.Bucket{{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 1, Concurrency: 2}}}
	c := stack.Call{Cost: 1, Charge: 1, Keys: []string{"rl:{a}:default"}, Buckets: b, Slot: stack.Slot{Key: "rl:{a}:default:slots"}}
	s := &store{err: &transport.ShedError{Cause: "queue_full", Why: "full"}}
	l := NewLayer("", 0, fs, s)
	if _, err := l.Decide(context.Background(), c); !errors.As(err, new(*transport.ShedError)) {
		t.Fatalf("a shed call: err %v", err)
	}
	s.err = errors.New("i/o timeout")
	if _, err := l.Decide(context.Background(), c); err != s.err {
		t.Fatalf("a failed call: err %v, want the store's", err)
	}
	fs.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(expired) != 1 || expired[0] != "release_failed" {
		t.Fatalf("expired %v; want the failed call's slot alone, given up as release_failed", expired)
	}
}
