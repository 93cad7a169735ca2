package quota

import (
	"fmt"
	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/names"
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
	// (https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#concurrency-limits). An admitted request holds a
	// slot until it ends (Decision.Slot). 0: no concurrency limit. At most
	// one bucket of a request may carry one.
	Concurrency int64
	// MaxDebt, when above 0, caps the debt a settle (core's Limiter.Settle)
	// may leave in this bucket, in tokens: a settle never takes the balance
	// below -MaxDebt, and what lies beyond is forgiven, counted
	// (tollgate.settles.forgiven) and logged. 0: no cap, a debt is carried
	// in full (https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#reserve-then-settle). At most MaxCost.
	MaxDebt int64
	// MaxSettleRatio, when above 0, is the largest actual cost a settle
	// charges this bucket, as a multiple of the request's estimate (its
	// cost at admission): an actual cost above it is refused, counted
	// (tollgate.settles.refused) and logged, and the bucket is charged the
	// multiple instead. 0: none; else at least 1 and at most
	// MaxSettleRatioLimit.
	MaxSettleRatio float64
}

// MaxSettleRatioLimit is the largest Quota.MaxSettleRatio accepted.
const MaxSettleRatioLimit = 1e9

// PerSecond returns a quota of n tokens per second with a burst of n.
func PerSecond(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n)} }

// PerMinute returns a quota of n tokens per minute with a burst of n.
func PerMinute(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n) / 60} }

// PerHour returns a quota of n tokens per hour with a burst of n.
func PerHour(n int64) Quota { return Quota{Capacity: n, RefillPerSecond: float64(n) / 3600} }

// Validate reports whether q can be enforced: a capacity from 1 to
// MaxCapacity, a finite refill rate above 0 and at most MaxRefillPerSecond,
// a concurrency limit from 0 (none) to MaxConcurrency, a max debt from 0
// (no cap) to MaxCost, a max settle ratio of 0 (none) or 1 to
// MaxSettleRatioLimit, and an empty bucket
// that refills within 400 days (capacity / rate). The
// error wraps [ErrInvalid] and names the field at fault.
func (q Quota) Validate() error {
	switch {
	case q.Capacity <= 0:
		return fmt.Errorf("%w: capacity must be > 0, got %d", ErrInvalid, q.Capacity)
	case q.Capacity > MaxCapacity:
		return fmt.Errorf("%w: capacity must be <= %d, got %d", ErrInvalid, int64(MaxCapacity), q.Capacity)
	case math.IsNaN(q.RefillPerSecond) || math.IsInf(q.RefillPerSecond, 0):
		return fmt.Errorf("%w: refill rate must be finite, got %v", ErrInvalid, q.RefillPerSecond)
	case q.RefillPerSecond <= 0:
		return fmt.Errorf("%w: refill rate must be > 0, got %v", ErrInvalid, q.RefillPerSecond)
	case q.RefillPerSecond > MaxRefillPerSecond:
		return fmt.Errorf("%w: refill rate must be <= %g, got %v", ErrInvalid, float64(MaxRefillPerSecond), q.RefillPerSecond)
	case q.Concurrency < 0 || q.Concurrency > MaxConcurrency:
		return fmt.Errorf("%w: concurrency must be 0 (none) to %d, got %d", ErrInvalid, MaxConcurrency, q.Concurrency)
	case q.MaxDebt < 0 || q.MaxDebt > MaxCost:
		return fmt.Errorf("%w: max debt must be 0 (no cap) to %d, got %d", ErrInvalid, int64(MaxCost), q.MaxDebt)
	case math.IsNaN(q.MaxSettleRatio) || q.MaxSettleRatio != 0 && (q.MaxSettleRatio < 1 || q.MaxSettleRatio > MaxSettleRatioLimit):
		return fmt.Errorf("%w: max settle ratio must be 0 (none) or 1 to %g, got %v", ErrInvalid, float64(MaxSettleRatioLimit), q.MaxSettleRatio)
	case float64(q.Capacity)/q.RefillPerSecond > maxFillTime.Seconds():
		return fmt.Errorf("%w: capacity/refill rate (time to refill) must be <= %v, got %.0fs", ErrInvalid, maxFillTime, float64(q.Capacity)/q.RefillPerSecond)
	}
	return nil
}

// String formats q as "capacity/rate per second", e.g. "20 burst, 2/s",
// followed by the concurrency limit and the settle settings when it has
// them: "20 burst, 2/s, 4 in flight".
func (q Quota) String() string {
	s := strconv.FormatInt(q.Capacity, 10) + " burst, " + strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64) + "/s"
	if q.Concurrency > 0 {
		s += ", " + strconv.FormatInt(q.Concurrency, 10) + " in flight"
	}
	if q.MaxDebt > 0 {
		s += ", debt capped at " + strconv.FormatInt(q.MaxDebt, 10)
	}
	if q.MaxSettleRatio > 0 {
		s += ", settles up to " + strconv.FormatFloat(q.MaxSettleRatio, 'g', -1, 64) + "x the estimate"
	}
	return s
}

// Tenant is the verified identity a request is limited under. The auth layer
// sets it (from a verified token or session) with gate.ContextWithTenant; the
// adapters read it with gate.TenantFromContext. It is never taken from a header
// the client sets: a client that chooses its own key chooses its own quota.
type Tenant struct {
	// ID names the tenant. It may hold any bytes (1 to MaxTenantIDLen of
	// them); the key scheme escapes what Redis Cluster or a log would
	// misread. IDs beginning with "anonymous:" are kept for the Gate's
	// anonymous callers: Gate.Decide refuses a verified tenant spelled so,
	// and a TieredResolver serves such a tenant its tier defaults only.
	ID string
	// Tier selects the tenant's default quotas (for example "free" or
	// "pro"). Empty means the resolver's default tier.
	Tier string
}

// Subject is how a tenant is named outside the process (a gRPC QuotaFailure
// subject, a log field): "tenant:" plus the escaped ID.
func (t Tenant) Subject() string { return "tenant:" + names.Escape(t.ID) }

// MaxTenantIDLen is the longest tenant ID accepted, in bytes.
const MaxTenantIDLen = names.MaxTenantIDLen

// MaxCost is the largest cost one request may take.
const MaxCost = MaxCapacity

// DefaultClass is the class of a request that names none.
const DefaultClass = "default"

// ErrInvalid reports a quota that cannot be enforced: a capacity or rate
// that is not positive, not finite, or absurdly large. It is the error
// package core's checks wrap for such a quota.
var ErrInvalid = errs.InvalidQuota

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

// ValidateName reports whether name can name a bucket: 1 to 64 bytes of
// ASCII letters, digits, '_', '-' and '.'. Names travel into keys, headers
// and metric labels, so they are kept plain.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: bucket name is empty", errs.InvalidRequest)
	}
	if len(name) > names.MaxNameLen {
		return fmt.Errorf("%w: bucket name is %d bytes, longer than %d", errs.InvalidRequest, len(name), names.MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: bucket name %q has byte %q at %d; use letters, digits, '_', '-', '.'", errs.InvalidRequest, name, c, i)
		}
	}
	return nil
}
