package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
)

// TestSettleIsAppliedOncePerReservation: a settle repeated for one
// admission (a retry after a lost reply, a report delivered twice) charges
// the difference once, on a standalone server and on a Cluster.
func TestSettleIsAppliedOncePerReservation(t *testing.T) {
	ceiling := quota.Bucket{Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: 5000, RefillPerSecond: 50}}
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		clock := testkit.NewFakeClock() // frozen: no refill
		c := be.client(t)
		l := vr.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: llm}, ceiling), core.WithClock(clock.Now))
		for _, repeats := range []int{1, 2, 10} {
			tenant := fmt.Sprintf("once-%d", repeats)
			d := check(t, l, tenant, 100)
			for range repeats {
				settle(t, l, tenant, d, 300)
			}
			if got := balance(t, l, tenant, "default"); got != 700 {
				t.Fatalf("settled 100 up to 300 %d times: %v tokens, want 700 (charged once)", repeats, got)
			}
			if got := balance(t, l, tenant, quota.CeilingBucket); got != 4700 {
				t.Fatalf("ceiling after %d settles: %v tokens, want 4700", repeats, got)
			}
			// another admission of the same tenant is its own reservation
			d = check(t, l, tenant, 100)
			for range repeats {
				settle(t, l, tenant, d, 0)
			}
			if got := balance(t, l, tenant, "default"); got != 700 {
				t.Fatalf("reserved 100 then refunded it %d times: %v tokens, want 700", repeats, got)
			}
		}
	})
}

// TestSettleRetriedAfterLostRepliesChargesOnce: a settle whose reply the
// network loses (the script ran; the client saw an error) and that the
// caller retries until one reply arrives charges once, whether the first,
// the second or the tenth call is the one answered.
func TestSettleRetriedAfterLostRepliesChargesOnce(t *testing.T) {
	upstream := strings.TrimPrefix(strings.TrimSuffix(redistest.URL(t), "/0"), "redis://")
	for _, calls := range []int{1, 2, 10} {
		t.Run(fmt.Sprintf("calls=%d", calls), func(t *testing.T) {
			proxy := redistest.NewFaultProxy(t, upstream)
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: time.Second})
			t.Cleanup(func() { _ = c.Close() })
			clock := testkit.NewFakeClock()
			l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now),
				core.WithBatching(false), core.WithDenyCache(false), core.WithTimeout(time.Second))
			d := check(t, l, "lost", 100)
			proxy.Set(redistest.DropReply)
			for i := range calls {
				if i == calls-1 {
					proxy.Set(redistest.Pass)
				}
				_, err := l.Settle(context.Background(), quota.Tenant{ID: "lost"}, d, 300)
				switch {
				case i < calls-1 && err == nil:
					t.Fatalf("settle %d of %d: no error while the proxy drops replies", i+1, calls)
				case i < calls-1 && !errors.Is(err, core.ErrStore):
					t.Fatalf("settle %d of %d: %v, want ErrStore", i+1, calls, err)
				case i == calls-1 && err != nil:
					t.Fatalf("settle %d of %d, replies pass: %v", i+1, calls, err)
				}
			}
			key, _ := l.Keys().Bucket("lost", "default")
			direct := redistest.Client(t)
			if got, _ := stored(t, direct, key); got != 700 {
				t.Fatalf("settle of 100 up to 300 sent %d times, %d replies lost: %v tokens stored, want 700 (charged once)", calls, calls-1, got)
			}
		})
	}
}

// TestSettleAfterTheWindowIsRefused: a reservation may be settled for the
// settle window after its admission (real time, as the mark's life in the
// store), and its mark lives no longer; after the window Settle refuses,
// and the estimate stands.
func TestSettleAfterTheWindowIsRefused(t *testing.T) {
	clock := testkit.NewFakeClock() // the limiter's clock: frozen, no refill
	c := redistest.Client(t)
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now),
		core.WithSettleWindow(time.Second))
	d := check(t, l, "late", 100)
	settle(t, l, "late", d, 150) // within the window: 850 left
	key, _ := l.Keys().Bucket("late", "default")
	var marks []string
	iter := c.Scan(context.Background(), 0, key+":settled:*", 100).Iterator()
	for iter.Next(context.Background()) {
		marks = append(marks, iter.Val())
	}
	if err := iter.Err(); err != nil || len(marks) != 1 {
		t.Fatalf("marks of the settled reservation: %v, %v; want one", marks, err)
	}
	if ttl := c.PTTL(context.Background(), marks[0]).Val(); ttl <= 0 || ttl > time.Second {
		t.Fatalf("mark %s lives %v more, want (0, 1s]: the window's rest", marks[0], ttl)
	}
	d2 := check(t, l, "late", 100)      // 750 left
	time.Sleep(1100 * time.Millisecond) // past the window, whatever the limiter's clock says
	if _, err := l.Settle(context.Background(), quota.Tenant{ID: "late"}, d2, 0); !errors.Is(err, core.ErrInvalidRequest) {
		t.Fatalf("settle 1.1 s after the admission, window 1 s: %v, want ErrInvalidRequest", err)
	}
	if got := balance(t, l, "late", "default"); got != 750 {
		t.Fatalf("balance after the refused refund: %v, want 750 (the estimate stands)", got)
	}
}
