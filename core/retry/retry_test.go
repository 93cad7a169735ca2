package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/retry"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDelayDistribution draws many waits from a seeded source and checks
// that they are upward only, within the spread and the cap, and spread
// evenly over [hint, hint+spread) (a chi-square test over ten bins).
func TestDelayDistribution(t *testing.T) {
	cases := []struct {
		name         string
		hint         time.Duration
		opts         []retry.Option
		lo, hi       time.Duration // every wait within [lo, hi]
		uniformUntil time.Duration // waits uniform over [lo, uniformUntil)
	}{
		{"proportional", 2 * time.Second, nil, 2 * time.Second, 2400 * time.Millisecond, 2400 * time.Millisecond},
		{"min spread for short hints", 5 * time.Millisecond, nil, 5 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond},
		{"zero hint", 0, nil, 0, 10 * time.Millisecond, 10 * time.Millisecond},
		{"custom jitter", time.Second, []retry.Option{retry.WithJitter(1, 0)}, time.Second, 2 * time.Second, 2 * time.Second},
		{"capped", 9 * time.Second, []retry.Option{retry.WithMaxDelay(10 * time.Second), retry.WithJitter(0.5, 0)}, 9 * time.Second, 10 * time.Second, 0},
		{"no jitter", time.Second, []retry.Option{retry.WithJitter(0, 0)}, time.Second, time.Second, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := retry.New(append(c.opts, retry.WithRand(rand.New(rand.NewPCG(1, 2))))...)
			const n = 20000
			const bins = 10
			var counts [bins]int
			var capped int
			for range n {
				d, err := p.Delay(retry.Hint{After: c.hint}, 1)
				if err != nil {
					t.Fatalf("Delay: %v", err)
				}
				if d < c.lo || d > c.hi {
					t.Fatalf("wait %v outside [%v, %v]", d, c.lo, c.hi)
				}
				if c.uniformUntil == 0 {
					continue
				}
				if d == c.hi {
					capped++
				}
				b := int(float64(d-c.lo) / float64(c.uniformUntil-c.lo) * bins)
				counts[min(b, bins-1)]++
			}
			if c.uniformUntil == 0 {
				return
			}
			if capped > n/1000 {
				t.Errorf("%d waits at the bound: not uniform", capped)
			}
			// chi-square, 9 degrees of freedom: 27.88 is the 0.1% critical value
			exp := float64(n) / bins
			var chi float64
			for _, k := range counts {
				chi += (float64(k) - exp) * (float64(k) - exp) / exp
			}
			if chi > 27.88 {
				t.Errorf("waits not uniform over the spread: bins %v, chi-square %.1f", counts, chi)
			}
		})
	}
}

// TestDelayCapped: with the cap inside the jitter spread, waits pile up at
// the cap and none exceeds it.
func TestDelayCapped(t *testing.T) {
	p := retry.New(retry.WithMaxDelay(10*time.Second), retry.WithJitter(0.5, 0), retry.WithRand(rand.New(rand.NewPCG(3, 4))))
	atCap := 0
	for range 1000 {
		d, err := p.Delay(retry.Hint{After: 9 * time.Second}, 1)
		if err != nil || d < 9*time.Second || d > 10*time.Second {
			t.Fatalf("Delay = %v, %v", d, err)
		}
		if d == 10*time.Second {
			atCap++
		}
	}
	// jitter spread 4.5 s, of which 3.5 s lie above the cap: ~78%
	if math.Abs(float64(atCap)/1000-3.5/4.5) > 0.06 {
		t.Fatalf("%d of 1000 waits at the cap, want about %.0f", atCap, 1000*3.5/4.5)
	}
}

func TestDelayRefuses(t *testing.T) {
	p := retry.New(retry.WithMaxAttempts(3), retry.WithMaxDelay(time.Minute))
	cases := []struct {
		name    string
		hint    retry.Hint
		attempt int
		want    error
	}{
		{"never", retry.Hint{Never: true}, 1, retry.ErrNever},
		{"never even with a delay", retry.Hint{Never: true, After: time.Second}, 1, retry.ErrNever},
		{"attempts used", retry.Hint{After: time.Second}, 3, retry.ErrAttempts},
		{"hint over the cap", retry.Hint{After: time.Hour}, 1, retry.ErrTooLong},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Delay(c.hint, c.attempt)
			if !errors.Is(err, c.want) || !errors.Is(err, retry.ErrNoRetry) {
				t.Fatalf("Delay(%+v, %d) error = %v, want %v", c.hint, c.attempt, err, c.want)
			}
		})
	}
	if d, err := p.Delay(retry.Hint{After: time.Second}, 2); err != nil || d < time.Second {
		t.Fatalf("attempt 2 of 3: %v, %v", d, err)
	}
}

// An option given a value it cannot use panics where the policy is
// built, naming it; nil options are skipped and leave the defaults.
func TestOptionsRefuseBadValues(t *testing.T) {
	for option, o := range map[string]retry.Option{
		"retry.WithMaxAttempts": retry.WithMaxAttempts(0),
		"retry.WithMaxDelay":    retry.WithMaxDelay(-1),
		"retry.WithJitter":      retry.WithJitter(math.NaN(), 0),
		"retry.WithRand":        retry.WithRand(nil),
		"retry.WithSleep":       retry.WithSleep(nil),
	} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); !strings.HasPrefix(r, "tollgate: retry.New: "+option+": ") {
					t.Errorf("%s: recovered %q, want a panic naming it", option, r)
				}
			}()
			retry.New(o)
		}()
	}
	for _, bad := range []retry.Option{retry.WithJitter(-1, 0), retry.WithJitter(math.Inf(1), 0), retry.WithJitter(0.1, -1)} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); !strings.HasPrefix(r, "tollgate: retry.New: retry.WithJitter: ") {
					t.Errorf("recovered %q, want a panic naming WithJitter", r)
				}
			}()
			retry.New(bad)
		}()
	}
	p := retry.New(nil)
	if p.MaxAttempts() != retry.DefaultMaxAttempts || p.MaxDelay() != retry.DefaultMaxDelay {
		t.Fatalf("defaults changed: %d %v", p.MaxAttempts(), p.MaxDelay())
	}
	for range 100 {
		d, err := p.Delay(retry.Hint{After: time.Second}, 1)
		if err != nil || d < time.Second || d >= 1200*time.Millisecond {
			t.Fatalf("Delay = %v, %v: default jitter changed", d, err)
		}
	}
	if err := p.Wait(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

func TestNextRespectsContext(t *testing.T) {
	p := retry.New(retry.WithJitter(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Next(ctx, retry.Hint{After: time.Millisecond}, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := p.Next(ctx, retry.Hint{After: 5 * time.Second}, 1); !errors.Is(err, retry.ErrDeadline) {
		t.Fatalf("deadline before the wait ends: %v", err)
	}
	if d, err := p.Next(ctx, retry.Hint{After: 10 * time.Millisecond}, 1); err != nil || d != 10*time.Millisecond {
		t.Fatalf("fits the deadline: %v, %v", d, err)
	}
}

func TestSleepStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	if err := retry.Sleep(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("Sleep returned after %v", el)
	}
	start = time.Now()
	if err := retry.Sleep(context.Background(), 30*time.Millisecond); err != nil || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("Sleep = %v after %v", err, time.Since(start))
	}
}
