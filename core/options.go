package core

import (
	"log/slog"
	"time"
)

// FailurePolicy says what a check answers when the store fails.
type FailurePolicy uint8

const (
	// FailOpen lets requests through unchecked while the store fails
	// (Decision.Reason = ReasonFailedOpen). Availability over enforcement.
	FailOpen FailurePolicy = iota
	// FailClosed rejects requests while the store fails
	// (ReasonFailedClosed: HTTP 503, gRPC Unavailable; never 429).
	FailClosed
)

// String returns "open" or "closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "closed"
	}
	return "open"
}

// DefaultTimeout bounds one check's store call.
const DefaultTimeout = 100 * time.Millisecond

// Option configures a Limiter.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	prefix  string
	policy  FailurePolicy
	timeout time.Duration
	clock   func() time.Time // nil: server clock (TIME)
	shadow  bool
	log     *slog.Logger
}

func defaultConfig() config {
	return config{prefix: DefaultPrefix, policy: FailOpen, timeout: DefaultTimeout, log: slog.Default()}
}

// WithPrefix sets the key prefix. Default "rl". See [Keys].
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithFailurePolicy sets what a check answers when the store fails. Default
// FailOpen.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// WithTimeout bounds each check's store call. Default 100 ms; values <= 0 are
// ignored. The bound holds even for a client without ContextTimeoutEnabled.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	})
}

// WithClientClock makes the script take the time from now (this process's
// clock) instead of calling TIME on the server. Use it only for a managed
// Redis that forbids TIME in scripts: replicas whose clocks disagree then
// see slightly different buckets. A clock that steps backwards neither mints
// nor burns tokens. nil is ignored. Default: the server clock.
func WithClientClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.clock = now
		}
	})
}

// WithShadow turns on shadow (dry-run) mode: decisions are computed,
// charged and reported as usual, but a request that would be denied is let
// through with ReasonShadowDenied. Default off.
func WithShadow(on bool) Option {
	return optionFunc(func(c *config) { c.shadow = on })
}

// WithLogger sets the logger for degraded decisions. Default slog.Default();
// nil is ignored.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.log = l
		}
	})
}
