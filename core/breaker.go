package core

import (
	"errors"
	"sync/atomic"
	"time"
)

// errCircuitOpen is the store error of a check made while the circuit
// breaker is open: the store was not called.
var errCircuitOpen = errors.New("circuit breaker open: store not called")

// Breaker defaults (WithCircuitBreaker states them): after defaultBreakerThreshold consecutive store failures
// the limiter stops calling the store for defaultBreakerCooldown, then lets
// one probe through; a success closes the circuit.
const (
	defaultBreakerThreshold = 5
	defaultBreakerCooldown  = time.Second
)

// breaker is a consecutive-failure circuit breaker. Lock-free: it sits on
// every check's path.
type breaker struct {
	threshold int64
	cooldown  time.Duration
	failures  atomic.Int64
	openUntil atomic.Int64 // unix nanos; 0 = closed
	probing   atomic.Bool
}

// allow reports whether a store call may be made now: always when closed;
// when open, only one probe after the cool-down (probe is then true). now
// comes from the limiter's clock, the same as failure's: the breaker reads
// no other clock.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	if b == nil {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now.UnixNano() < until {
		return false, false
	}
	ok = b.probing.CompareAndSwap(false, true)
	return ok, ok
}

// abandon ends a call that says nothing about the store (its caller left
// first): when it was the probe, the next call probes instead.
func (b *breaker) abandon(probe bool) {
	if b != nil && probe {
		b.probing.Store(false)
	}
}

// success closes the circuit.
func (b *breaker) success() {
	if b == nil {
		return
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.probing.Store(false)
	}
}

// failure counts a failed call (a transport failure or the limiter's own
// timeout; never a caller's, never an error reply about one request) and opens the circuit at the threshold (or
// re-opens it after a failed probe). It reports whether the circuit opened.
func (b *breaker) failure(now time.Time) bool {
	if b == nil {
		return false
	}
	n := b.failures.Add(1)
	if n >= b.threshold || b.probing.Load() {
		b.openUntil.Store(now.Add(b.cooldown).UnixNano())
		b.probing.Store(false)
		return true
	}
	return false
}
