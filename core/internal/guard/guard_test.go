package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/fallback"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/quota"
)

// next is a layer below the guard that must not be reached.
type next struct{ t *testing.T }

func (n next) Decide(context.Context, stack.Call) (stack.Result, error) {
	n.t.Error("the guard made a store call for a call it must answer itself")
	return stack.Result{}, nil
}

var errStore = errors.New("store")

// A call that shares a failure (a lease acquisition's it waited for) is
// answered as that failure says, without a store call: a shed one is shed
// and counted, any other by the local fallback or the failure policy,
// logged; a caller gone first is canceled. The answer states the
// request's cost.
func TestAnswersWithoutTheStore(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 1}
	c := stack.Call{Tenant: quota.Tenant{ID: "a"}, Class: "default", Cost: 3, Charge: 7,
		Keys: []string{"rl:{a}:default"}, Buckets: []quota.Bucket{{Name: "default", Quota: q}}, Sent: time.Now()}
	var sheds, logs []string
	h := Hooks{
		Log:  func(msg string, _ stack.Call, _ error, _ ...any) { logs = append(logs, msg) },
		Shed: func(_ context.Context, cause string) { sheds = append(sheds, cause) },
	}
	failed := errors.New("the acquirer's store failure")
	tests := []struct {
		name     string
		fb       *fallback.Buckets
		closed   bool
		failure  error
		canceled bool
		want     stack.Verdict
		fallback bool
		sheds    int
		logs     int
	}{
		{"shed", nil, false, &transport.ShedError{Cause: "queue_full", Why: "full"}, false, stack.Overloaded, false, 1, 0},
		{"failed open", nil, false, failed, false, stack.FailedOpen, false, 0, 1},
		{"failed closed", nil, true, failed, false, stack.FailedClosed, false, 0, 1},
		{"the local fallback", fallback.New(0.5, 10), true, failed, false, stack.OK, true, 0, 1},
		{"a caller gone", nil, true, nil, true, stack.Canceled, false, 0, 0},
	}
	for _, tt := range tests {
		sheds, logs = nil, nil
		g := New(nil, tt.fb, tt.closed, errStore, time.Now, h, next{t})
		ctx, cancel := context.WithCancel(context.Background())
		if tt.canceled {
			cancel()
		}
		call := c
		call.Failure = tt.failure
		r, err := g.Decide(ctx, call)
		cancel()
		switch {
		case r.Verdict != tt.want || r.Fallback != tt.fallback || r.Cost != c.Cost:
			t.Errorf("%s: verdict %v, fallback %v, cost %d; want %v, %v, %d", tt.name, r.Verdict, r.Fallback, r.Cost, tt.want, tt.fallback, c.Cost)
		case tt.failure != nil && err != tt.failure && !errors.Is(err, tt.failure):
			t.Errorf("%s: error %v, want the shared failure", tt.name, err)
		case tt.canceled && !errors.As(err, new(*transport.CallerGone)):
			t.Errorf("%s: error %v, want a caller gone", tt.name, err)
		case len(sheds) != tt.sheds || len(logs) != tt.logs:
			t.Errorf("%s: %d sheds counted, %d logs; want %d, %d", tt.name, len(sheds), len(logs), tt.sheds, tt.logs)
		case tt.fallback && (len(r.Buckets) != 1 || r.Buckets[0].Tokens != 4):
			// the local share, 5 of 10, less 3, scaled back by 1/0.5: 4
			t.Errorf("%s: buckets %+v, want the fallback's balance 4", tt.name, r.Buckets)
		}
	}
}
