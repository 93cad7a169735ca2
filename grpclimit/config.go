package grpclimit

import (
	"context"
	"fmt"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"google.golang.org/grpc/codes"
)

// defaultDomain is the ErrorInfo domain of a denial.
const defaultDomain = "tollgate.dev"

// Option configures the server interceptors. Options are applied in order;
// a nil Option, and an option given a nil value, is ignored. Everything
// core decides (the method table, default route, cost function, header
// style, anonymous callers, clock) is configured on the gate.Gate instead.
type Option func(*config)

type config struct {
	filters    []func(ctx context.Context, fullMethod string) bool
	deniedCode codes.Code
	domain     string
	message    *gate.Route
	onError    func(ctx context.Context, fullMethod string, err error)
}

func newConfig(opts []Option) config {
	c := config{deniedCode: codes.ResourceExhausted, domain: defaultDomain}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

func (c *config) validate() error {
	if c.deniedCode != codes.ResourceExhausted && c.deniedCode != codes.Unavailable {
		return fmt.Errorf("%w: grpclimit: WithDeniedCode: must be ResourceExhausted or Unavailable, got %v", core.ErrInvalidConfig, c.deniedCode)
	}
	if c.message != nil {
		if err := (gate.Routes{"message cost": *c.message}).Validate(); err != nil {
			return fmt.Errorf("grpclimit: WithMessageCost: %w", err)
		}
	}
	return nil
}

// WithFilter adds a filter; a call to fullMethod ("/pkg.Service/Method")
// is limited only if every filter returns true, and let through unchecked
// otherwise. Default: every call is limited. nil is ignored.
func WithFilter(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) {
		if f != nil {
			c.filters = append(c.filters, f)
		}
	}
}

// WithDeniedCode sets the status code of a denial: codes.ResourceExhausted
// (the default) or codes.Unavailable, for clients that only retry
// Unavailable. Any other code is a misconfiguration (every call answered
// Internal, the cause reported to the error handler). The details and
// trailers are the same either way.
func WithDeniedCode(code codes.Code) Option {
	return func(c *config) { c.deniedCode = code }
}

// WithDomain sets the ErrorInfo domain of a denial. Default "tollgate.dev";
// "" is ignored.
func WithDomain(domain string) Option {
	return func(c *config) {
		if domain != "" {
			c.domain = domain
		}
	}
}

// WithMessageCost also charges every message received on a client-stream
// or bidi stream, cost tokens of class, on top of the charge when the
// stream opens. A denied message is not delivered: the handler's RecvMsg
// returns the denial's status error (with its details and trailers), which
// the handler should return. A class or cost the route table would refuse
// is a misconfiguration. Default: messages are not charged.
func WithMessageCost(class string, cost int64) Option {
	return func(c *config) { c.message = &gate.Route{Class: class, Cost: cost} }
}

// WithErrorHandler sets a hook that receives the limiter's errors (store
// failures, invalid requests) for a call to fullMethod, for logs and
// metrics; the failure policy has already answered the call. It also
// receives the cause of a misconfiguration (a nil gate, a bad option, a
// cost function's bad route), which the client never sees. Default: none
// (core logs degraded decisions). nil is ignored.
func WithErrorHandler(h func(ctx context.Context, fullMethod string, err error)) Option {
	return func(c *config) {
		if h != nil {
			c.onError = h
		}
	}
}
