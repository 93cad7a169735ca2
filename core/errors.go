package core

import (
	"errors"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/transport"
)

// Sentinel errors. Errors returned by this package and its subpackages wrap
// one of them (or quota.ErrInvalid), so test with [errors.Is].
var (
	// ErrInvalidRequest reports a request the limiter cannot key or charge:
	// an empty or over-long tenant ID, a bad bucket name, a negative cost.
	ErrInvalidRequest = errs.InvalidRequest
	// ErrInvalidConfig reports a bad option or constructor argument.
	ErrInvalidConfig = errs.InvalidConfig
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
	ErrResolve = errs.Resolve
)

// Breaker defaults (WithCircuitBreaker states them): after
// defaultBreakerThreshold consecutive store failures of a shard the
// limiter stops calling it for defaultBreakerCooldown, then lets one probe
// through; a success closes the circuit.
const (
	defaultBreakerThreshold = 5
	defaultBreakerCooldown  = time.Second
)

// errProtocol marks a reply the limiter cannot decode.
var errProtocol = transport.ErrProtocol
