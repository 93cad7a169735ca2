package grpclimit

import (
	"context"
	"fmt"

	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/grpc/codes"
)

// DefaultDomain is the ErrorInfo domain of a denial.
const DefaultDomain = "tollgate.dev"

// Filter reports whether a call to fullMethod ("/pkg.Service/Method") is
// limited; false lets the call through unchecked.
type Filter func(ctx context.Context, fullMethod string) bool

// ErrorHandler receives the limiter's error (a store failure, an invalid
// request) for a call; the call has already been answered by the failure
// policy.
type ErrorHandler func(ctx context.Context, fullMethod string, err error)

// Option configures the server interceptors. Options are applied in order.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	gate       []core.GateOption
	filters    []Filter
	deniedCode codes.Code
	domain     string
	message    *core.Route
	onError    ErrorHandler
}

// gateOption passes o to the gate.
func gateOption(o core.GateOption) Option {
	return optionFunc(func(c *config) { c.gate = append(c.gate, o) })
}

func newConfig(opts []Option) config {
	c := config{deniedCode: codes.ResourceExhausted, domain: DefaultDomain}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

func (c *config) validate() error {
	if c.deniedCode != codes.ResourceExhausted && c.deniedCode != codes.Unavailable {
		return fmt.Errorf("%w: grpclimit: denied code must be ResourceExhausted or Unavailable, got %v", core.ErrInvalidConfig, c.deniedCode)
	}
	if c.message != nil {
		if err := (core.Routes{"message cost": *c.message}).Validate(); err != nil {
			return fmt.Errorf("grpclimit: WithMessageCost: %w", err)
		}
	}
	return nil
}

// WithMethods sets the (class, cost) of each method, keyed by full method
// ("/pkg.Service/Method"); a route with Exempt set is never limited.
// Default: none, so every method is charged to class "default" at cost 1
// (see WithDefaultRoute). nil is ignored.
func WithMethods(rs core.Routes) Option { return gateOption(core.WithRoutes(rs)) }

// WithDefaultRoute sets the class and cost of methods WithMethods does not
// name. Default: class "default", cost 1.
func WithDefaultRoute(r core.Route) Option { return gateOption(core.WithDefaultRoute(r)) }

// WithCostFunc decides a call's class and cost dynamically; it is
// consulted before the method table (core.Endpoint.Pattern is the full
// method, Method is empty). Default: none. nil is ignored.
func WithCostFunc(f core.CostFunc) Option { return gateOption(core.WithCostFunc(f)) }

// WithHeaderStyle selects the rate-limit metadata families, as
// core.WithHeaderStyle (names lower-cased for gRPC). Default
// core.DefaultHeaderStyle: ratelimit, ratelimit-policy and x-ratelimit-*.
func WithHeaderStyle(s core.HeaderStyle) Option { return gateOption(core.WithHeaderStyle(s)) }

// WithAnonymous admits callers with no tenant in the context as tenant
// "anonymous:<peer IP>" on tier (default "anonymous"), keyed by the
// connection's peer address, instead of answering Unauthenticated. Default
// off.
func WithAnonymous(tier string) Option { return gateOption(core.WithAnonymous(tier)) }

// WithGateOptions passes core gate options through (for example
// core.WithClock), after the options above that set the same thing.
// Default: none. nil options are ignored.
func WithGateOptions(opts ...core.GateOption) Option {
	return optionFunc(func(c *config) { c.gate = append(c.gate, opts...) })
}

// WithFilter adds a filter; a call is limited only if every filter returns
// true. Default: every call is limited. nil is ignored.
func WithFilter(f Filter) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.filters = append(c.filters, f)
		}
	})
}

// WithDeniedCode sets the status code of a denial: codes.ResourceExhausted
// (the default) or codes.Unavailable, for clients that only retry
// Unavailable. Any other code is a configuration error. The details and
// trailers are the same either way.
func WithDeniedCode(code codes.Code) Option {
	return optionFunc(func(c *config) { c.deniedCode = code })
}

// WithDomain sets the ErrorInfo domain of a denial. Default "tollgate.dev";
// "" is ignored.
func WithDomain(domain string) Option {
	return optionFunc(func(c *config) {
		if domain != "" {
			c.domain = domain
		}
	})
}

// WithMessageCost also charges every message received on a client-stream
// or bidi stream, cost tokens of class, on top of the charge when the
// stream opens. A denied message is not delivered: the handler's RecvMsg
// returns the denial's status error (with its details and trailers), which
// the handler should return. Default: messages are not charged.
func WithMessageCost(class string, cost int64) Option {
	return optionFunc(func(c *config) { c.message = &core.Route{Class: class, Cost: cost} })
}

// WithErrorHandler sets a hook that receives the limiter's errors (store
// failures, invalid requests), for logs and metrics; the failure policy
// has already answered the call. Default: none (core logs degraded
// decisions). nil is ignored.
func WithErrorHandler(h ErrorHandler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.onError = h
		}
	})
}
