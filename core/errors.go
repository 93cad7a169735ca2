package core

import (
	"errors"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// Sentinel errors. Errors returned by this package wrap one of them, so test
// with [errors.Is].
var (
	// ErrInvalidQuota reports a quota that cannot be enforced: a capacity or
	// rate that is not positive, not finite, or absurdly large.
	ErrInvalidQuota = errors.New("tollgate: invalid quota")
	// ErrInvalidRequest reports a request the limiter cannot key or charge:
	// an empty or over-long tenant ID, a bad bucket name, a negative cost.
	ErrInvalidRequest = errors.New("tollgate: invalid request")
	// ErrInvalidConfig reports a bad option or constructor argument.
	ErrInvalidConfig = errors.New("tollgate: invalid configuration")
	// ErrStore reports that the store (Redis) failed or did not answer in
	// time. The Decision returned with it says how the failure policy
	// answered (ReasonFailedOpen or ReasonFailedClosed).
	ErrStore = errors.New("tollgate: store unavailable")
	// ErrOverloaded reports that this process could not check a request in
	// time (ReasonOverloaded): a local condition, not a store failure, so it
	// never trips the circuit breaker and the failure policy does not apply.
	ErrOverloaded = transport.ErrOverloaded
	// ErrResolve reports that the buckets for a request could not be
	// resolved (for example an unknown tier or class).
	ErrResolve = errors.New("tollgate: cannot resolve quota")
)

// Breaker defaults (WithCircuitBreaker states them): after
// defaultBreakerThreshold consecutive store failures of a shard the
// limiter stops calling it for defaultBreakerCooldown, then lets one probe
// through; a success closes the circuit.
const (
	defaultBreakerThreshold = 5
	defaultBreakerCooldown  = time.Second
)
