package connectlimit

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
)

// defaultDomain is the ErrorInfo domain of a denial.
const defaultDomain = "tollgate.dev"

// Option configures [NewInterceptor]. Options are applied in order; a nil
// Option is skipped. An option given a value it cannot use makes
// NewInterceptor panic with a message naming it, where the interceptor is
// built. Everything core decides (the procedure table, default route, cost
// function, header style, anonymous callers) is configured on the
// gate.Gate instead.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// badOption is the error of an option given a value it cannot use.
func badOption(option, format string, args ...any) error {
	return fmt.Errorf("%w: connectlimit.%s: %s", core.ErrInvalidConfig, option, fmt.Sprintf(format, args...))
}

type config struct {
	filters    []func(ctx context.Context, procedure string) bool
	deniedCode connect.Code
	domain     string
	message    *gate.Route
	onError    func(ctx context.Context, procedure string, err error)
}

// newConfig applies opts, panicking when one is given a value it cannot
// use.
func newConfig(opts []Option) config {
	c := config{deniedCode: connect.CodeResourceExhausted, domain: defaultDomain}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&c); err != nil {
			panic("tollgate: connectlimit.NewInterceptor: " + strings.TrimPrefix(err.Error(), "tollgate: "))
		}
	}
	return c
}

// WithFilter adds a filter; a call to procedure ("/pkg.Service/Method")
// is limited only if every filter returns true, and let through unchecked
// otherwise. Default: every call is limited. nil is an error.
func WithFilter(f func(ctx context.Context, procedure string) bool) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return badOption("WithFilter", "nil function")
		}
		c.filters = append(c.filters, f)
		return nil
	})
}

// WithDeniedCode sets the code of a denial: connect.CodeResourceExhausted
// (the default) or connect.CodeUnavailable, for clients that only retry
// Unavailable. Any other code is an error. The details and metadata are
// the same either way.
func WithDeniedCode(code connect.Code) Option {
	return optionFunc(func(c *config) error {
		if code != connect.CodeResourceExhausted && code != connect.CodeUnavailable {
			return badOption("WithDeniedCode", "must be CodeResourceExhausted or CodeUnavailable, got %v", code)
		}
		c.deniedCode = code
		return nil
	})
}

// WithDomain sets the ErrorInfo domain of a denial. Default "tollgate.dev";
// "" is an error.
func WithDomain(domain string) Option {
	return optionFunc(func(c *config) error {
		if domain == "" {
			return badOption("WithDomain", "empty domain")
		}
		c.domain = domain
		return nil
	})
}

// WithMessageCost also charges every message received on a client-stream
// or bidi stream, cost tokens of class, on top of the charge when the
// stream opens. A denied message is not delivered: the handler's Receive
// returns the denial's error (with its details and metadata), which the
// handler should return. A class or cost the route table would refuse is
// an error. Default: messages are not charged.
func WithMessageCost(class string, cost int64) Option {
	return optionFunc(func(c *config) error {
		r := gate.Route{Class: class, Cost: cost}
		if err := (gate.Routes{"message cost": r}).Validate(); err != nil {
			return badOption("WithMessageCost", "%s", strings.TrimPrefix(err.Error(), "tollgate: "))
		}
		c.message = &r
		return nil
	})
}

// WithErrorHandler sets a hook that receives the limiter's errors (store
// failures, invalid requests) for a call to procedure, for logs and
// metrics; the failure policy has already answered the call. It also
// receives the cause of a misconfiguration (a cost function's bad route),
// which the client never sees. Default: none (core logs degraded
// decisions). nil is an error.
func WithErrorHandler(h func(ctx context.Context, procedure string, err error)) Option {
	return optionFunc(func(c *config) error {
		if h == nil {
			return badOption("WithErrorHandler", "nil function")
		}
		c.onError = h
		return nil
	})
}
