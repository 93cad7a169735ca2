package core

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Limits on quotas. A quota outside them is rejected by [Quota.Validate]
// before any Redis call: beyond them the arithmetic loses precision (float64
// holds integers exactly only below 2^53) or a bucket would take longer to
// refill than a rate limiter is meant to remember.
const (
	// MaxCapacity is the largest capacity accepted, 2^40 (about 1.1e12).
	MaxCapacity = 1 << 40
	// MaxRefillPerSecond is the fastest refill rate accepted.
	MaxRefillPerSecond = 1e12
	// MaxConcurrency is the largest concurrency limit accepted.
	MaxConcurrency = 100_000
)

// maxFillTime is the longest time an empty bucket may take to refill
// (capacity / rate). Longer periods are plan quotas, which need durable
// accounting, not a rate limiter.
const maxFillTime = 400 * 24 * time.Hour

// Quota is one token bucket's configuration.
type Quota struct {
	// Capacity is the largest burst, in tokens: a full bucket admits this
	// much cost at once.
	Capacity int64
	// RefillPerSecond is the sustained rate, in tokens per second. It may be
	// fractional: 0.1 is one token every ten seconds.
	RefillPerSecond float64
	// Concurrency, when above 0, is the most requests of one tenant charged
	// to this bucket that may be in flight at once, across every replica
	// (docs/semantics.md, "Concurrency limits"). An admitted request holds a
	// slot until it ends (Decision.Slot). 0: no concurrency limit. At most
	// one bucket of a request may carry one.
	Concurrency int64
}

// PerSecond returns a quota of n tokens per second with a burst of n.
func PerSecond(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n)} }

// PerMinute returns a quota of n tokens per minute with a burst of n.
func PerMinute(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n) / 60} }

// PerHour returns a quota of n tokens per hour with a burst of n.
func PerHour(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n) / 3600} }

// Validate reports whether q can be enforced: a capacity from 1 to
// MaxCapacity, a finite refill rate above 0 and at most MaxRefillPerSecond,
// a concurrency limit from 0 (none) to MaxConcurrency, and an empty bucket
// that refills within 400 days (capacity / rate). The
// error wraps [ErrInvalidQuota] and names the field at fault.
func (q Quota) Validate() error {
	switch {
	case q.Capacity <= 0:
		return fmt.Errorf("%w: capacity must be > 0, got %d", ErrInvalidQuota, q.Capacity)
	case q.Capacity > MaxCapacity:
		return fmt.Errorf("%w: capacity must be <= %d, got %d", ErrInvalidQuota, int64(MaxCapacity), q.Capacity)
	case math.IsNaN(q.RefillPerSecond) || math.IsInf(q.RefillPerSecond, 0):
		return fmt.Errorf("%w: refill rate must be finite, got %v", ErrInvalidQuota, q.RefillPerSecond)
	case q.RefillPerSecond <= 0:
		return fmt.Errorf("%w: refill rate must be > 0, got %v", ErrInvalidQuota, q.RefillPerSecond)
	case q.RefillPerSecond > MaxRefillPerSecond:
		return fmt.Errorf("%w: refill rate must be <= %g, got %v", ErrInvalidQuota, float64(MaxRefillPerSecond), q.RefillPerSecond)
	case q.Concurrency < 0 || q.Concurrency > MaxConcurrency:
		return fmt.Errorf("%w: concurrency must be 0 (none) to %d, got %d", ErrInvalidQuota, MaxConcurrency, q.Concurrency)
	case float64(q.Capacity)/q.RefillPerSecond > maxFillTime.Seconds():
		return fmt.Errorf("%w: capacity/refill rate (time to refill) must be <= %v, got %.0fs", ErrInvalidQuota, maxFillTime, float64(q.Capacity)/q.RefillPerSecond)
	}
	return nil
}

// String formats q as "capacity/rate per second", e.g. "20 burst, 2/s",
// followed by the concurrency limit when it has one: "20 burst, 2/s, 4 in
// flight".
func (q Quota) String() string {
	s := strconv.FormatInt(q.Capacity, 10) + " burst, " + strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64) + "/s"
	if q.Concurrency > 0 {
		s += ", " + strconv.FormatInt(q.Concurrency, 10) + " in flight"
	}
	return s
}

// ttlMillis is the bucket's key TTL: the time an empty bucket takes to refill,
// plus a second of margin. An idle bucket is full by then, so its expiry
// loses nothing. Always a positive integer, formatted here rather than by the
// server.
func (q Quota) ttlMillis() string {
	ms := math.Ceil(float64(q.Capacity)/q.RefillPerSecond*1000) + 1000
	return strconv.FormatInt(int64(ms), 10)
}

// Bucket is one named token bucket that applies to a request: the request's
// class, or a tenant-wide ceiling.
type Bucket struct {
	// Name is the policy name: it appears in the Redis key, in
	// RateLimit-Policy and in metrics. See [ValidateName].
	Name  string
	Quota Quota
}

// CeilingBucket is the conventional name of a tenant-wide bucket that every
// request of the tenant is charged to, beside its class bucket.
const CeilingBucket = "tenant"

// maxNameLen is the longest bucket (class) name.
const maxNameLen = 64
