package core_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// fakeClock is a clock the test moves by hand (WithClock): the store then
// takes its times from it, so the reservation arithmetic is exact.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.UnixMicro(1_800_000_000_000_000)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// forEachStore runs f on every backend (the reservation path has no
// check-path variants: it goes straight to the store).
func forEachStore(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

var waitTenant = quota.Tenant{ID: "w1"}

func reserve(t *testing.T, l *core.Limiter, cost int64, maxWait time.Duration) *core.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), core.Request{Tenant: waitTenant, Cost: cost}, maxWait)
	if err != nil {
		t.Fatalf("Reserve(cost %d, max wait %v): %v", cost, maxWait, err)
	}
	return r
}

// peekTokens reads the bucket's balance, refilled to the clock's now.
func peekTokens(t *testing.T, l *core.Limiter) float64 {
	t.Helper()
	d, err := l.Peek(context.Background(), waitTenant, "default")
	if err != nil {
		t.Fatal(err)
	}
	return d.Tokens
}

// wantWait asserts r was reserved with a wait of want, by the store's
// clock: exactly, as its binding bucket's debt says (the refill repays it
// at the time to act), and as its Time says, which is the reply's arrival
// plus the wait (within the test's own time since the reply).
func wantWait(t *testing.T, r *core.Reservation, want time.Duration) {
	t.Helper()
	if !r.Decision.Allowed || r.Decision.Reason != core.ReasonOK {
		t.Fatalf("reservation %v (%v), want reserved", r.Decision.Reason, r.Decision.Allowed)
	}
	debt := time.Duration(-r.Decision.Tokens / r.Decision.Quota.RefillPerSecond * float64(time.Second))
	if d := debt - want; d > time.Microsecond || d < -time.Microsecond {
		t.Fatalf("reservation left %v tokens: a wait of %v, want %v", r.Decision.Tokens, debt, want)
	}
	if got := time.Until(r.Time()); got > want || got < want-250*time.Millisecond {
		t.Fatalf("reservation's time is %v away, want %v", got, want)
	}
}

// A reservation charges at once and waits for the refill: capacity 10 at
// 10/s, a drained bucket lends against its refill; a wait above the max is
// refused and charges nothing; a cost above capacity is never.
func TestReserveChargesNowAndWaitsForTheRefill(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		clock := newFakeClock()
		l := newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 10}}),
			core.WithClock(clock.Now))
		r := reserve(t, l, 10, 0)
		if !r.Decision.Allowed || r.Delay() != 0 || r.Decision.Tokens != 0 {
			t.Fatalf("first reservation: %+v delay %v, want at once with 0 left", r.Decision, r.Delay())
		}
		r = reserve(t, l, 5, time.Second)
		if r.Decision.Tokens != -5 {
			t.Fatalf("second reservation left %v, want -5", r.Decision.Tokens)
		}
		// the reservation's time is 500 ms after the store's now; the
		// process waits it from the reply, on its own clock
		if d := r.Delay(); d > 500*time.Millisecond || d < 400*time.Millisecond {
			t.Fatalf("second reservation waits %v, want 500ms", d)
		}
		// a check is denied while the balance is below zero
		if d := check(t, l, waitTenant.ID, 1); d.Allowed {
			t.Fatalf("a check admitted while a reservation waits: %+v", d)
		}
		clock.Advance(100 * time.Millisecond) // balance -4
		before := peekTokens(t, l)
		refused := reserve(t, l, 10, time.Second) // would wait 1.4 s
		if refused.Decision.Allowed || refused.Decision.Reason != core.ReasonOverLimit {
			t.Fatalf("reservation over the max wait: %+v", refused.Decision)
		}
		if got, want := refused.Decision.RetryAfter, 400*time.Millisecond; got != want {
			t.Errorf("refused reservation's RetryAfter %v, want %v", got, want)
		}
		if !refused.Time().IsZero() {
			t.Errorf("refused reservation has a time %v", refused.Time())
		}
		if after := peekTokens(t, l); after != before || after != -4 {
			t.Fatalf("refused reservation changed the bucket: %v then %v, want -4", before, after)
		}
		never := reserve(t, l, 11, time.Hour)
		if never.Decision.Allowed || never.Decision.Reason != core.ReasonCostExceedsCapacity {
			t.Fatalf("cost above capacity: %+v", never.Decision)
		}
		if after := peekTokens(t, l); after != -4 {
			t.Fatalf("a cost above capacity changed the bucket to %v", after)
		}
		// the same reservation within its max wait: charged, 1.4 s
		r = reserve(t, l, 10, 1400*time.Millisecond)
		wantWait(t, r, 1400*time.Millisecond)
		if r.Decision.Tokens != -14 {
			t.Fatalf("third reservation left %v, want -14", r.Decision.Tokens)
		}
		// a settle of the reservation charges its actual cost
		if _, err := l.Settle(context.Background(), waitTenant, r.Decision, 4); err != nil {
			t.Fatal(err)
		}
		if got := peekTokens(t, l); got != -8 {
			t.Fatalf("after settling 10 as 4 the balance is %v, want -8", got)
		}
	})
}

// Two buckets are reserved all or nothing; the wait is the longer one's.
func TestReserveTwoBucketsAllOrNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		clock := newFakeClock()
		l := newLimiter(t, b.client(t), staticResolver(
			quota.Bucket{Name: "requests", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 10}},
			quota.Bucket{Name: "tokens", Quota: quota.Quota{Capacity: 100, RefillPerSecond: 50}},
		), core.WithClock(clock.Now))
		ctx := context.Background()
		req := core.Request{Tenant: waitTenant, Class: "default", Cost: 10}
		r, err := l.Reserve(ctx, req, 0)
		if err != nil || !r.Decision.Allowed {
			t.Fatalf("first: %+v %v", r.Decision, err)
		}
		// requests now waits 1 s, tokens none: a max wait of 500 ms refuses
		// both, and tokens keeps its 90
		r, err = l.Reserve(ctx, req, 500*time.Millisecond)
		if err != nil || r.Decision.Allowed || r.Decision.Bucket != "requests" {
			t.Fatalf("second: %+v %v", r.Decision, err)
		}
		if got := r.Decision.Buckets[1].Tokens; got != 90 {
			t.Fatalf("a refused reservation left tokens at %v, want 90", got)
		}
		r, err = l.Reserve(ctx, req, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantWait(t, r, time.Second)
		if r.Decision.Bucket != "requests" || r.Decision.Buckets[0].Tokens != -10 || r.Decision.Buckets[1].Tokens != 80 {
			t.Fatalf("third: %+v", r.Decision)
		}
	})
}

// Cancel gives back what later reservations did not count on: x/time/rate's
// rule, cost - rate x (last - time). Cancelled latest first, every
// reservation comes back, and a later caller is served sooner by
// cost / rate per cancelled reservation; cancelled earliest first, the
// later reservations counted on each one's tokens, and nothing comes back.
func TestReserveCancel(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		for _, order := range []string{"latest first", "earliest first"} {
			t.Run(order, func(t *testing.T) {
				clock := newFakeClock()
				l := newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 50}}),
					core.WithClock(clock.Now))
				reserve(t, l, 10, 0) // drained
				var rs []*core.Reservation
				for i := range 20 {
					r := reserve(t, l, 1, time.Second)
					wantWait(t, r, time.Duration(i+1)*20*time.Millisecond)
					rs = append(rs, r)
				}
				// the last 10 waiters cancel
				cancelled := rs[10:]
				if order == "earliest first" {
					// the first 10 cancel, in order: each is counted on by
					// the 10 after it
					cancelled = rs[:10]
				}
				for i := range cancelled {
					r := cancelled[i]
					if order == "latest first" {
						r = cancelled[len(cancelled)-1-i]
					}
					if err := r.Cancel(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				// a second Cancel does nothing
				if err := cancelled[0].Cancel(context.Background()); err != nil {
					t.Fatal(err)
				}
				next := reserve(t, l, 1, time.Second)
				switch order {
				case "latest first":
					// served after the 10 that stayed: 11 x 20 ms, not 21
					wantWait(t, next, 11*20*time.Millisecond)
					if got := peekTokens(t, l); got != -11 {
						t.Fatalf("balance %v, want -11", got)
					}
				default:
					wantWait(t, next, 21*20*time.Millisecond)
				}
			})
		}
	})
}

// At or after its time a reservation's tokens are taken: Cancel gives
// nothing back. A refused reservation has nothing to cancel.
func TestReserveCancelAfterItsTime(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		clock := newFakeClock()
		l := newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 10}}),
			core.WithClock(clock.Now))
		reserve(t, l, 10, 0)
		r := reserve(t, l, 5, time.Second) // at +500 ms
		clock.Advance(500 * time.Millisecond)
		if err := r.Cancel(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := peekTokens(t, l); got != 0 {
			t.Fatalf("balance %v after a cancel at the reservation's time, want 0", got)
		}
		refused := reserve(t, l, 10, 0)
		if err := refused.Cancel(context.Background()); err != nil || peekTokens(t, l) != 0 {
			t.Fatalf("cancel of a refused reservation: %v", err)
		}
	})
}

// Wait blocks until the reservation's time; a context that ends first
// cancels the reservation, whose tokens come back; the context's deadline
// is the max wait.
func TestWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		l := newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 10}}))
		req := core.Request{Tenant: waitTenant, Cost: 5}
		ctx := context.Background()
		if d, err := l.Wait(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("first wait: %+v %v", d, err)
		}
		start := time.Now()
		d, err := l.Wait(ctx, req) // 500 ms
		if err != nil || !d.Allowed {
			t.Fatalf("second wait: %+v %v", d, err)
		}
		if waited := time.Since(start); waited < 400*time.Millisecond {
			t.Fatalf("waited %v for 5 tokens at 10/s", waited)
		}
		// a deadline shorter than the wait refuses at once, charging nothing:
		// on a bucket that refills 5 tokens in 10 s, so that no stall of
		// this machine between the calls brings the wait under the deadline
		slow := newLimiter(t, b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 0.5}}))
		slowReq := core.Request{Tenant: quota.Tenant{ID: "w-slow"}, Cost: 5}
		if d, err := slow.Wait(ctx, slowReq); err != nil || !d.Allowed {
			t.Fatalf("first wait on the slow bucket: %+v %v", d, err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		d, err = slow.Wait(short, slowReq)
		if err != nil || d.Allowed || d.Reason != core.ReasonOverLimit {
			t.Fatalf("wait beyond the deadline: %+v %v", d, err)
		}
		// a context cancelled during the wait: the reservation is cancelled
		cctx, stop := context.WithCancel(ctx)
		go func() {
			time.Sleep(50 * time.Millisecond) // a moment into the wait: cancelled whenever it comes
			stop()
		}()
		d, err = l.Wait(cctx, core.Request{Tenant: waitTenant, Cost: 5})
		if d.Allowed || d.Reason != core.ReasonCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %+v %v", d, err)
		}
		// it was the latest reservation: its 5 tokens came back (kept, the
		// balance would be near -4.5)
		if got := peekTokens(t, l); got < 0 {
			t.Fatalf("balance %v after the cancelled wait", got)
		}
	})
}

// A reservation of a bucket with a concurrency limit is refused as
// invalid; a max wait out of range too.
func TestReserveInvalid(t *testing.T) {
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 5, RefillPerSecond: 10, Concurrency: 2}}))
	r, err := l.Reserve(context.Background(), core.Request{Tenant: waitTenant, Cost: 1}, time.Second)
	if !errors.Is(err, core.ErrInvalidRequest) || r.Decision.Allowed || r.Decision.Reason != core.ReasonInvalid {
		t.Fatalf("concurrency bucket: %+v %v", r.Decision, err)
	}
	r, err = l.Reserve(context.Background(), core.Request{Tenant: waitTenant, Cost: 1}, -time.Second)
	if !errors.Is(err, core.ErrInvalidRequest) || r.Decision.Allowed {
		t.Fatalf("negative max wait: %+v %v", r.Decision, err)
	}
	if _, err := core.New(redistest.Client(t), staticResolver(), core.WithMaxWait(25*time.Hour)); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("WithMaxWait(25h): %v", err)
	}
}

// When the store fails, the failure policy answers a reservation as a
// check: open, the caller proceeds at once; closed, it does not; the error
// wraps ErrStore either way. A Cancel then fails as a store failure.
func TestReserveFailurePolicy(t *testing.T) {
	upstream := strings.TrimPrefix(strings.TrimSuffix(redistest.URL(t), "/0"), "redis://")
	proxy := redistest.NewFaultProxy(t, upstream)
	opt, err := redis.ParseURL(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	res := staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 1}})
	for _, tt := range []struct {
		policy  core.FailurePolicy
		reason  core.Reason
		allowed bool
	}{{core.FailOpen, core.ReasonFailedOpen, true}, {core.FailClosed, core.ReasonFailedClosed, false}} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			l := newLimiter(t, client, res, core.WithFailurePolicy(tt.policy), core.WithTimeout(200*time.Millisecond))
			req := core.Request{Tenant: waitTenant, Cost: 1}
			proxy.Set(redistest.Pass)
			held, err := l.Reserve(t.Context(), req, time.Hour) // drained
			if err != nil || !held.Decision.Allowed {
				t.Fatalf("reserve: %+v %v", held.Decision, err)
			}
			held, err = l.Reserve(t.Context(), req, time.Hour) // waits 1 s
			if err != nil || held.Delay() == 0 {
				t.Fatalf("reserve: %+v %v", held.Decision, err)
			}
			proxy.Set(redistest.Blackhole)
			d, err := l.Wait(t.Context(), req)
			if !errors.Is(err, core.ErrStore) || d.Reason != tt.reason || d.Allowed != tt.allowed {
				t.Fatalf("Wait on a silent store: %+v %v, want %v", d, err, tt.reason)
			}
			if err := held.Cancel(t.Context()); !errors.Is(err, core.ErrStore) {
				t.Fatalf("Cancel on a silent store: %v", err)
			}
			proxy.Set(redistest.Pass)
		})
	}
}

// Concurrent reservations from three limiters (as three processes) form
// one sequential history on the store's clock: ordered by the stamp each
// admission carries (the store's now when it was granted), every
// reservation's balance is the previous one's, refilled over the time
// between their stamps and charged its cost, to the last bit. A lost or
// doubled charge, or two reservations granted against one balance, breaks
// the chain. (Refusals write nothing, so the chain skips them; cancels are
// not part of this history.)
func TestReserveHistoryIsSequential(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		q := quota.Quota{Capacity: 10, RefillPerSecond: 100}
		prefix := redistest.Prefix(t)
		client := b.client(t)
		type grant struct {
			stamp  int64
			tokens float64
			cost   int64
		}
		var mu sync.Mutex
		var grants []grant
		var refused int
		var wg sync.WaitGroup
		end := time.Now().Add(1500 * time.Millisecond)
		for p := range 3 {
			l, err := core.New(client, staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithPrefix(prefix), core.WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(end); i++ {
						cost := int64(1 + (p+g+i)%3)
						maxWait := time.Duration((p*7+g*3+i)%5) * 20 * time.Millisecond
						r, err := l.Reserve(context.Background(), core.Request{Tenant: waitTenant, Cost: cost}, maxWait)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if r.Decision.Reason == core.ReasonOK {
							grants = append(grants, grant{r.Decision.Buckets[0].Stamp.UnixMicro(), r.Decision.Tokens, cost})
						} else {
							refused++
						}
						mu.Unlock()
						// as Wait: the next reservation after this one's
						// time, or a moment after a refusal
						time.Sleep(max(r.Delay(), min(r.Decision.RetryAfter, 10*time.Millisecond)))
					}
				}()
			}
		}
		wg.Wait()
		// ties (one microsecond) are ordered by balance: no time passes
		// between them, so each charge leaves less
		slices.SortFunc(grants, func(a, b grant) int {
			if a.stamp != b.stamp {
				return int(a.stamp - b.stamp)
			}
			switch {
			case a.tokens > b.tokens:
				return -1
			case a.tokens < b.tokens:
				return 1
			}
			return 0
		})
		if len(grants) < 100 || refused == 0 {
			t.Fatalf("%d grants, %d refusals: the run did not exercise both", len(grants), refused)
		}
		tokens, last := float64(q.Capacity), grants[0].stamp
		for i, g := range grants {
			if g.stamp > last {
				tokens += float64(g.stamp-last) * q.RefillPerSecond / 1000000
				if tokens > float64(q.Capacity) {
					tokens = float64(q.Capacity)
				}
				last = g.stamp
			}
			tokens -= float64(g.cost)
			if tokens != g.tokens {
				t.Fatalf("grant %d of %d (stamp %d, cost %d) left %v, the sequential model %v", i, len(grants), g.stamp, g.cost, g.tokens, tokens)
			}
			if -tokens > q.RefillPerSecond*0.08+1e-9 {
				t.Fatalf("grant %d went %v below zero, beyond rate x the longest max wait", i, -tokens)
			}
		}
		t.Logf("%d grants, %d refusals: one sequential history", len(grants), refused)
	})
}

// A debt the stored form cannot hold (below -2^50) is refused as too long
// a wait, never written: read back, it would be garbage, a full bucket.
func TestReserveRefusesADebtBeyondTheStoredForm(t *testing.T) {
	clock := newFakeClock()
	q := quota.Quota{Capacity: 1 << 40, RefillPerSecond: 1e12}
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithClock(clock.Now))
	var last *core.Reservation
	for i := range 1100 {
		r := reserve(t, l, 1<<40, 24*time.Hour)
		if !r.Decision.Allowed {
			if i < 1024 || r.Decision.Reason != core.ReasonOverLimit {
				t.Fatalf("reservation %d refused: %+v", i, r.Decision)
			}
			if got := peekTokens(t, l); got != last.Decision.Tokens {
				t.Fatalf("after the refusal the bucket holds %v, want the last debt %v", got, last.Decision.Tokens)
			}
			return
		}
		last = r
	}
	t.Fatalf("1100 reservations of 2^40 admitted: the debt is %v", last.Decision.Tokens)
}

// On the real clock, 16 waiters reserve at once from two limiters (a
// bucket of 1 at 1/s: they queue a second apart); the latest 8 cancel,
// latest first, and each gives its token back: a waiter arriving then
// queues behind the 8 that stayed, 8 s sooner than behind all 16, as the
// cancel rule states (k/ρ per cancelled reservation). The earliest of the
// rest cancelling then gives nothing back: the later ones were granted
// against its token.
func TestReserveCancelHalfTheWaiters(t *testing.T) {
	forEachStore(t, func(t *testing.T, b backend) {
		q := quota.Quota{Capacity: 1, RefillPerSecond: 1}
		prefix := redistest.Prefix(t)
		var lims []*core.Limiter
		for range 2 {
			l, err := core.New(b.client(t), staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithPrefix(prefix), core.WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			lims = append(lims, l)
		}
		start := time.Now()
		rs := make([]*core.Reservation, 16)
		var wg sync.WaitGroup
		for i := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := lims[i%2].Reserve(context.Background(), core.Request{Tenant: waitTenant, Cost: 1}, time.Minute)
				if err != nil || !r.Decision.Allowed {
					t.Errorf("reserve: %+v %v", r.Decision, err)
				}
				rs[i] = r
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// the store's order: by the store's clock at each reservation, then
		// (the same microsecond) each later one left less. The balance alone
		// misorders reservations more than a second of refill apart, as a
		// loaded machine can spread them.
		slices.SortFunc(rs, func(a, b *core.Reservation) int {
			if c := a.Decision.Buckets[0].Stamp.Compare(b.Decision.Buckets[0].Stamp); c != 0 {
				return c
			}
			return cmp.Compare(b.Decision.Tokens, a.Decision.Tokens)
		})
		for i := 15; i >= 8; i-- {
			if err := rs[i].Cancel(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if err := rs[1].Cancel(context.Background()); err != nil { // granted against by rs[2..7]
			t.Fatal(err)
		}
		next := reserve(t, lims[0], 1, time.Minute)
		elapsed := time.Since(start).Seconds()
		// behind the 8 that stayed: a debt of 8 (-7 after the first's
		// token, -8 with this one), less what the refill paid since
		if got := next.Decision.Tokens; got < -8 || got > -8+elapsed*q.RefillPerSecond {
			t.Fatalf("the next waiter left %v tokens, want -8 (+ up to %.3f of refill): 8 cancels gave back 8", got, elapsed)
		}
	})
}
