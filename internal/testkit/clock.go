package testkit

import (
	"sync/atomic"
	"time"
)

// A FakeClock is a settable clock for tests that drive a limiter in
// client-clock mode (core.WithClock(c.Now)), so that refills and resets are
// exact without sleeping. It moves only by Advance and Set, and is safe for
// concurrent use. Its resolution is a microsecond.
type FakeClock struct{ us atomic.Int64 }

// NewFakeClock returns a FakeClock at 2026-01-01T00:00:00Z.
func NewFakeClock() *FakeClock {
	c := &FakeClock{}
	c.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return c
}

// Now returns the clock's time, in UTC.
func (c *FakeClock) Now() time.Time { return time.UnixMicro(c.us.Load()).UTC() }

// Advance moves the clock by d (back when d is negative).
func (c *FakeClock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// Set puts the clock at t.
func (c *FakeClock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }
