package rls

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"golang.org/x/net/http/httpguts"
)

// Descriptor entry keys the server reads. Other entries are ignored.
const (
	// KeyTenant is the entry holding the tenant ID (required).
	KeyTenant = "tenant"
	// KeyTier is the entry holding the tenant's tier, read only with
	// WithTrustedTier (else, and without it, the resolver's default tier;
	// the tenant's overrides apply either way).
	KeyTier = "tier"
	// KeyClass is the entry holding the class (optional: quota.DefaultClass).
	KeyClass = "class"
)

// MaxDescriptors is the most descriptors one request may carry; a longer
// request is answered invalid descriptor by descriptor, nothing charged.
const MaxDescriptors = 64

// ErrorHandler receives the limiter's error (a store failure, an invalid
// or unresolvable descriptor) for a request; the request has already been
// answered by the failure policy or as invalid.
type ErrorHandler func(ctx context.Context, err error)

// Option configures a Server. Options are applied in order; nil ones are
// skipped. One given a value it cannot use makes New fail with an error
// naming it and wrapping core.ErrInvalidConfig.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// badOption is the error of an option given a value it cannot use.
func badOption(option, format string, args ...any) error {
	return fmt.Errorf("%w: rls.%s: %s", core.ErrInvalidConfig, option, fmt.Sprintf(format, args...))
}

type config struct {
	style     render.HeaderStyle
	maxCost   int64
	onError   ErrorHandler
	rules     *Rules
	limits    bool
	shadow    bool
	quota     bool
	metadata  bool
	trustTier bool
	tiers     *quota.TieredResolver
	limitHdrs *limitHeaders
	maxHold   time.Duration // 0: a slot is freed at once (WithSlotHold)
}

func newConfig(opts []Option) (config, error) {
	c := config{style: render.DefaultHeaderStyle, maxCost: quota.MaxCost}
	for _, o := range opts {
		if o != nil {
			if err := o.apply(&c); err != nil {
				return config{}, err
			}
		}
	}
	return c, c.validate()
}

func (c *config) validate() error {
	if c.rules == nil && (c.limits || c.shadow || c.quota || c.metadata) {
		return fmt.Errorf("%w: rls: WithDescriptorLimits, WithGlobalShadow, WithGlobalQuota and WithDynamicMetadata need WithRules", core.ErrInvalidConfig)
	}
	if c.rules != nil && (c.trustTier || c.tiers != nil) {
		return fmt.Errorf("%w: rls: WithTrustedTier and WithTiers are for the tenant mapping, not WithRules (a rule names its tier entry)", core.ErrInvalidConfig)
	}
	if h := c.limitHdrs; h != nil {
		for _, n := range []string{h.limit, h.remaining, h.reset} {
			if !httpguts.ValidHeaderFieldName(n) {
				return fmt.Errorf("%w: rls: limit header name %q is not an HTTP header name", core.ErrInvalidConfig, n)
			}
		}
	}
	if c.maxHold < 0 || c.maxHold > MaxSlotHold {
		return fmt.Errorf("%w: rls: slot hold must be 0 to %v, got %v", core.ErrInvalidConfig, MaxSlotHold, c.maxHold)
	}
	if c.maxCost < 1 || c.maxCost > quota.MaxCost {
		return fmt.Errorf("%w: rls: max cost must be 1 to %d, got %d", core.ErrInvalidConfig, int64(quota.MaxCost), c.maxCost)
	}
	return nil
}

// MaxSlotHold is the longest WithSlotHold.
const MaxSlotHold = 24 * time.Hour

// WithSlotHold holds the concurrency slot a hit takes (a class with a
// concurrency limit) until a negative hit (is_negative_hits, sent by
// Envoy's apply_on_stream_done when the request ends) of the same tenant
// and class frees it, or for at most maxHold: a gateway that dies
// mid-request, or a route that never sends the negative hit, keeps a slot
// no longer than maxHold past its hit (plus the lease when this process
// dies too). Set it above the longest request the routes allow (their
// timeouts). 0, the default, frees a hit's slot at once: such a class is
// then only denied while the services' requests fill it. At most
// MaxSlotHold.
func WithSlotHold(maxHold time.Duration) Option {
	return optionFunc(func(c *config) error {
		if maxHold < 0 || maxHold > MaxSlotHold {
			return fmt.Errorf("%w: rls.WithSlotHold: want 0 to %v, got %v", core.ErrInvalidConfig, MaxSlotHold, maxHold)
		}
		c.maxHold = maxHold
		return nil
	})
}

// WithHeaderStyle selects the rate-limit header families put in
// response_headers_to_add, as gate.WithHeaderStyle does for the HTTP
// adapters. Default render.DefaultHeaderStyle.
func WithHeaderStyle(s render.HeaderStyle) Option {
	return optionFunc(func(c *config) error {
		if err := s.Validate(); err != nil {
			return badOption("WithHeaderStyle", "%v", err)
		}
		c.style = s
		return nil
	})
}

// WithMaxCost bounds the cost (hits_addend) of one descriptor: a larger one
// is answered invalid and charges nothing. Default and most quota.MaxCost.
func WithMaxCost(n int64) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > quota.MaxCost {
			return badOption("WithMaxCost", "max cost must be 1 to %d, got %d", int64(quota.MaxCost), n)
		}
		c.maxCost = n
		return nil
	})
}

// WithErrorHandler sets the hook that receives the limiter's errors.
// Default: none (core logs and counts them). nil is an error (leave the
// option out instead).
func WithErrorHandler(h ErrorHandler) Option {
	return optionFunc(func(c *config) error { return setHandler(&c.onError, "WithErrorHandler", h) })
}

// setHandler sets *dst to h, the value of option; nil is an error.
func setHandler(dst *ErrorHandler, option string, h ErrorHandler) error {
	if h == nil {
		return badOption(option, "nil handler")
	}
	*dst = h
	return nil
}

// WithRules answers by an envoyproxy/ratelimit configuration (see
// [Config]) instead of the tenant, tier and class entries: each descriptor
// is matched against its domain's rules as the reference does. The limiter
// given to New must resolve with r (core.New(client, r, ...)). nil is an
// error.
func WithRules(r *Rules) Option {
	return optionFunc(func(c *config) error {
		if r == nil {
			return badOption("WithRules", "nil *Rules (build them with NewRules)")
		}
		c.rules = r
		return nil
	})
}

// WithDescriptorLimits applies a descriptor's limit override (the
// RateLimitDescriptor's limit, set by the route's rate_limits) in place of
// the rule it matches, as the reference does; with [WithRules] only.
// Default off: the gateway would choose the quota.
func WithDescriptorLimits(on bool) Option {
	return optionFunc(func(c *config) error { c.limits = on; return nil })
}

// WithGlobalShadow answers every request OK while its descriptors keep
// their OVER_LIMIT statuses, as the reference's SHADOW_MODE; with
// [WithRules] only. Default off.
func WithGlobalShadow(on bool) Option {
	return optionFunc(func(c *config) error { c.shadow = on; return nil })
}

// WithGlobalQuota makes every descriptor a quota, as the reference's
// QUOTA_MODE makes every rule quota_mode: a request is answered
// OVER_LIMIT only when every descriptor of it (but the unlimited ones) is
// over its limit, each keeping its own status, and each is charged on its
// own. With [WithRules] only. Default off: only the rules with quota_mode
// are quotas.
func WithGlobalQuota(on bool) Option {
	return optionFunc(func(c *config) error { c.quota = on; return nil })
}

// WithDynamicMetadata puts what the reference's RESPONSE_DYNAMIC_METADATA
// puts in every answer's dynamic_metadata: the domain, the descriptors
// (entries as "key=value", limit override, hits_addend), the request's
// hits_addend when not 0, and "metadata", the rule metadata of the
// descriptors that passed (not over their limit), merged in order. With
// [WithRules] only. Default off.
func WithDynamicMetadata(on bool) Option {
	return optionFunc(func(c *config) error { c.metadata = on; return nil })
}

// WithTrustedTier reads the descriptor's tier entry (KeyTier) as the
// tenant's tier. Turn it on only when the gateway fills it from the
// verified credential (a JWT claim, as the route in
// https://github.com/tollgate-go/tollgate/blob/main/docs/envoy.md#envoy-configuration does): a
// tier the client can choose is a quota the client can choose. Default
// off: the tier entry is ignored and every tenant has the tier file's
// default tier (and its overrides). Without WithRules only.
func WithTrustedTier(on bool) Option {
	return optionFunc(func(c *config) error { c.trustTier = on; return nil })
}

// WithTiers names the tier file behind the limiter (its resolver): a
// descriptor whose tier or class it does not define is then answered
// invalid without a check, so that descriptor values never become metric
// labels or resolver lookups of their own. Without WithRules only (the
// rules bound their names themselves). nil is an error.
func WithTiers(t *quota.TieredResolver) Option {
	return optionFunc(func(c *config) error {
		if t == nil {
			return badOption("WithTiers", "nil *quota.TieredResolver")
		}
		c.tiers = t
		return nil
	})
}

// The reference's header names (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER defaults).
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// WithLimitHeaders answers with envoyproxy/ratelimit's three response
// headers (its LIMIT_RESPONSE_HEADERS_ENABLED) in place of the
// WithHeaderStyle families and the denial body: the limit, the remaining
// count and the seconds until reset of the descriptor closest to its limit
// (the last one over it, if any), as the reference chooses it, each read
// from that descriptor's status. An empty name is the reference's default
// (DefaultLimitHeader, DefaultRemainingHeader, DefaultResetHeader); a
// name that is not an HTTP field name is an error.
func WithLimitHeaders(limit, remaining, reset string) Option {
	return optionFunc(func(c *config) error {
		h := &limitHeaders{cmp.Or(limit, DefaultLimitHeader), cmp.Or(remaining, DefaultRemainingHeader), cmp.Or(reset, DefaultResetHeader)}
		for _, n := range []string{h.limit, h.remaining, h.reset} {
			if !httpguts.ValidHeaderFieldName(n) {
				return badOption("WithLimitHeaders", "limit header name %q is not an HTTP header name", n)
			}
		}
		c.limitHdrs = h
		return nil
	})
}

type limitHeaders struct{ limit, remaining, reset string }
