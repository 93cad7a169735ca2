package core_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestSettleModel runs random sequences of reservations, settles up and
// down, abandoned reservations and clock steps against a reference model of
// the arithmetic in docs/semantics.md: after every step the stored balance
// is the model's, never above capacity nor below minus the capacity, every
// admission is the model's, and the forgiven amount is the model's, so no
// charge is lost or minted.
func TestSettleModel(t *testing.T) {
	const capacity, rate = 1000.0, 10.0
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		for seed := range uint64(4) {
			clock := conformance.NewFakeClock()
			c := be.client(t)
			l := vr.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: llm}), core.WithClock(clock.Now))
			tenant := "model" + string(rune('a'+seed))
			key, _ := l.Keys().Bucket(tenant, "default")
			rng := rand.New(rand.NewPCG(seed, 7))
			tok, last := capacity, clock.Now()
			refill := func() {
				now := clock.Now()
				if now.After(last) {
					tok = min(capacity, tok+now.Sub(last).Seconds()*rate)
					last = now
				}
			}
			var pending []core.Decision
			for step := range 300 {
				op := rng.IntN(10)
				switch {
				case op < 4: // reserve
					k := 1 + rng.Int64N(300)
					d := check(t, l, tenant, k)
					refill()
					if want := tok >= float64(k); d.Allowed != want {
						t.Fatalf("seed %d step %d: reserve %d at %v tokens: allowed %v, model %v", seed, step, k, tok, d.Allowed, want)
					}
					if d.Allowed {
						tok -= float64(k)
						pending = append(pending, d)
					}
				case op < 8 && len(pending) > 0: // settle one, up or down
					i := rng.IntN(len(pending))
					d := pending[i]
					pending = append(pending[:i], pending[i+1:]...)
					a := rng.Int64N(1500)
					f := settle(t, l, tenant, d, a)
					refill()
					left, forgiven := min(capacity, tok-float64(a-d.Cost)), int64(0)
					if a == d.Cost {
						left = tok // no call
					}
					if left < -capacity {
						forgiven = int64(-capacity - left + 0.999999)
						left = -capacity
					}
					if f != forgiven {
						t.Fatalf("seed %d step %d: forgiven %d, model %d", seed, step, f, forgiven)
					}
					tok = left
				case op < 9 && len(pending) > 0: // abandoned: never settled
					pending = pending[1:]
				default:
					clock.Advance(time.Duration(rng.Int64N(int64(30 * time.Second))))
					continue
				}
				refill()
				if got := check(t, l, tenant, 0).Tokens; !near(got, tok, 1e-6) {
					t.Fatalf("seed %d step %d (op %d): balance %v, model %v", seed, step, op, got, tok)
				}
				// as stored: a peek reads a value outside [-C, C] as a full bucket
				if got, _ := stored(t, c, key); got > capacity || got < -capacity {
					t.Fatalf("seed %d step %d: stored %v outside [-C, C]", seed, step, got)
				}
			}
		}
	})
}
