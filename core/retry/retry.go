package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/errs"
)

// Defaults of a Policy.
const (
	// DefaultMaxAttempts is the number of attempts, the first included.
	DefaultMaxAttempts = 3
	// DefaultMaxDelay is the longest single wait, jitter included.
	DefaultMaxDelay = 30 * time.Second
	// DefaultJitter is the upward jitter, as a fraction of the hint.
	DefaultJitter = 0.2
	// DefaultMinJitter is the smallest jitter spread, so that short hints
	// are spread too.
	DefaultMinJitter = 10 * time.Millisecond
)

// Hint is what a throttled answer says about retrying.
type Hint struct {
	// After is the shortest wait before a retry can succeed.
	After time.Duration
	// Never reports that the request can never succeed as sent (its cost
	// exceeds the capacity): it must not be retried.
	Never bool
}

// ErrNoRetry is returned by [Policy.Delay] when a hint must not be retried.
// The errors it wraps say why; test with errors.Is.
var ErrNoRetry = errors.New("tollgate/retry: not retried")

// Reasons Delay refuses a retry; each wraps ErrNoRetry.
var (
	// ErrNever: the server said the request can never succeed.
	ErrNever = fmt.Errorf("%w: the server answered that the request can never succeed", ErrNoRetry)
	// ErrAttempts: every attempt is used.
	ErrAttempts = fmt.Errorf("%w: no attempts left", ErrNoRetry)
	// ErrTooLong: the hint is longer than the policy's MaxDelay.
	ErrTooLong = fmt.Errorf("%w: the server's retry delay exceeds the maximum delay", ErrNoRetry)
	// ErrDeadline: the context's deadline would pass before the wait ends.
	ErrDeadline = fmt.Errorf("%w: the context's deadline would pass before the retry", ErrNoRetry)
)

// Option configures a Policy. One given a value it cannot use makes New
// panic with a message naming it, where the policy is built (New returns
// no error: a policy is built once, with values the program chose).
type Option interface{ apply(*Policy) error }

type optionFunc func(*Policy) error

func (f optionFunc) apply(p *Policy) error { return f(p) }

// WithMaxAttempts sets how many attempts a request gets, the first
// included; n must be at least 1 (1 disables retries). Default 3.
func WithMaxAttempts(n int) Option {
	return optionFunc(func(p *Policy) error {
		return errs.SetPositive(&p.maxAttempts, "retry.WithMaxAttempts", "attempts", n)
	})
}

// WithMaxDelay caps one wait, jitter included; d must be positive. A hint
// longer than d is not retried at all (a shorter wait would be denied
// again). Default 30 s.
func WithMaxDelay(d time.Duration) Option {
	return optionFunc(func(p *Policy) error {
		return errs.SetPositive(&p.maxDelay, "retry.WithMaxDelay", "max delay", d)
	})
}

// WithJitter sets the upward jitter: a wait is drawn uniformly from
// [hint, hint+spread), spread = max(fraction*hint, min), then capped at the
// maximum delay. Default fraction 0.2, min 10 ms. Both must be finite and
// not negative; 0, 0 turns jitter off.
func WithJitter(fraction float64, min time.Duration) Option {
	return optionFunc(func(p *Policy) error {
		if !(fraction >= 0) || math.IsInf(fraction, 0) || min < 0 {
			return errs.BadOption("retry.WithJitter", "want a finite fraction and a minimum not negative, got %v, %v", fraction, min)
		}
		p.jitter, p.minJitter = fraction, min
		return nil
	})
}

// WithRand sets the random source of the jitter, for example a seeded
// rand.New(rand.NewPCG(1, 2)) in tests. Calls are serialised, so r need not
// be safe for concurrent use. Default: math/rand/v2's global source. nil is
// an error.
func WithRand(r *rand.Rand) Option {
	return optionFunc(func(p *Policy) error {
		if r == nil {
			return errs.BadOption("retry.WithRand", "nil *rand.Rand")
		}
		p.rnd = r
		return nil
	})
}

// WithSleep replaces how the policy waits (default [Sleep]): for tests
// that record waits instead of sleeping, or to account waits in a metric.
// f must return ctx's error when ctx is done. nil is an error.
func WithSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return optionFunc(func(p *Policy) error {
		if f == nil {
			return errs.BadOption("retry.WithSleep", "nil function")
		}
		p.sleep = f
		return nil
	})
}

// Policy is how a throttled client waits before retrying. Build it with
// [New]; the zero value is not usable. A Policy is safe for concurrent use.
type Policy struct {
	maxAttempts int
	maxDelay    time.Duration
	jitter      float64
	minJitter   time.Duration
	mu          sync.Mutex // guards rnd
	rnd         *rand.Rand
	sleep       func(context.Context, time.Duration) error
}

// New returns a policy with the defaults, changed by opts (nil options are
// skipped). An option given a value it cannot use panics, naming it.
func New(opts ...Option) *Policy {
	p := &Policy{maxAttempts: DefaultMaxAttempts, maxDelay: DefaultMaxDelay, jitter: DefaultJitter, minJitter: DefaultMinJitter, sleep: Sleep}
	for _, o := range opts {
		if o != nil {
			if err := o.apply(p); err != nil {
				panic("tollgate: retry.New: " + strings.TrimPrefix(err.Error(), "tollgate: "))
			}
		}
	}
	return p
}

// MaxAttempts returns the number of attempts, the first included.
func (p *Policy) MaxAttempts() int { return p.maxAttempts }

// MaxDelay returns the cap on one wait.
func (p *Policy) MaxDelay() time.Duration { return p.maxDelay }

func (p *Policy) float64() float64 {
	if p.rnd == nil {
		return rand.Float64()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rnd.Float64()
}

// Delay returns how long to wait before attempt number attempt+1, after
// attempt (1 for the first) was throttled with hint h. The wait is at least
// h.After and at most the policy's MaxDelay. The error (wrapping
// ErrNoRetry) says why there is no retry: the answer was "never", the
// attempts are used up, or the hint exceeds MaxDelay.
func (p *Policy) Delay(h Hint, attempt int) (time.Duration, error) {
	switch {
	case h.Never:
		return 0, ErrNever
	case attempt >= p.maxAttempts:
		return 0, ErrAttempts
	case h.After > p.maxDelay:
		return 0, fmt.Errorf("%w (%v > %v)", ErrTooLong, h.After, p.maxDelay)
	}
	after := max(h.After, 0)
	spread := max(time.Duration(p.jitter*float64(after)), p.minJitter)
	d := after + time.Duration(p.float64()*float64(spread))
	if d < after { // overflow
		d = p.maxDelay
	}
	return min(d, p.maxDelay), nil
}

// Next is Delay under a context: it also refuses a retry when ctx is done
// (returning ctx's error) or when ctx's deadline would pass before the wait
// ends (ErrDeadline: the retry could only fail).
func (p *Policy) Next(ctx context.Context, h Hint, attempt int) (time.Duration, error) {
	d, err := p.Delay(h, attempt)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return 0, ErrDeadline
	}
	return d, nil
}

// Wait waits d as the policy waits (see [WithSleep]); it returns ctx's
// error when ctx is done first.
func (p *Policy) Wait(ctx context.Context, d time.Duration) error { return p.sleep(ctx, d) }

// Sleep waits d, or until ctx is done, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
