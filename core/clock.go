package core

import "time"

// Now returns the time on the limiter's clock: the one WithClock gave, else
// the system clock. The gate (core/gate) and the Envoy server (rls) date
// their time-of-day header values with it, so that one WithClock drives
// the limiter and everything that answers from it.
func (l *Limiter) Now() time.Time { return l.now() }
