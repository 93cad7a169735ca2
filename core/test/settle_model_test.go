package core_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestSettleModel runs random sequences of reservations, settles up and
// down, abandoned reservations and clock steps against a reference model of
// the arithmetic in docs/semantics.md: after every step the stored balance
// is the model's, never above capacity nor below minus the capacity, every
// admission is the model's, and the amount not charged (refused above the
// ratio, forgiven at the cap) is the model's, so no charge is lost or
// minted: without a cap the debt is carried in full; with one the stored
// balance never goes below minus the cap.
func TestSettleModel(t *testing.T) {
	const capacity, rate = 1000.0, 10.0
	settings := []struct {
		name    string
		maxDebt int64
		ratio   float64
	}{{"carried", 0, 0}, {"capped", 700, 0}, {"capped+ratio", 700, 2.5}, {"ratio", 0, 4}}
	forEachBackend(t, func(t *testing.T, be backend, vr variant) {
		for seed := range uint64(8) {
			set := settings[seed%uint64(len(settings))]
			q := llm
			q.MaxDebt, q.MaxSettleRatio = set.maxDebt, set.ratio
			clock := testkit.NewFakeClock()
			c := be.client(t)
			l := vr.newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: q}), core.WithClock(clock.Now))
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
					a := rng.Int64N(2500)
					f := settle(t, l, tenant, d, a)
					refill()
					charged, refused := a, int64(0)
					if set.ratio > 0 && float64(a) > set.ratio*float64(d.Cost) {
						charged = int64(set.ratio * float64(d.Cost))
						refused = a - charged
					}
					delta := float64(charged - d.Cost)
					left, forgiven := min(capacity, tok-delta), int64(0)
					if a == d.Cost {
						left, refused = tok, 0 // no call
					}
					if floor := -float64(set.maxDebt); set.maxDebt > 0 && delta > 0 && left < floor {
						if tok < floor {
							floor = tok
						}
						forgiven = int64(math.Ceil(floor - left))
						left = floor
					}
					if f != forgiven+refused {
						t.Fatalf("seed %d (%s) step %d: not charged %d, model %d refused + %d forgiven", seed, set.name, step, f, refused, forgiven)
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
				// as stored: never above capacity, nor below minus the cap
				if got, _ := stored(t, c, key); got > capacity || set.maxDebt > 0 && got < -float64(set.maxDebt) {
					t.Fatalf("seed %d (%s) step %d: stored %v outside [-%d, C]", seed, set.name, step, got, set.maxDebt)
				}
			}
		}
	})
}
