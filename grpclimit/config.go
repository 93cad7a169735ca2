package grpclimit

import (
	"context"

	"github.com/tollgate-go/tollgate/rpcadapt"
	"google.golang.org/grpc/codes"
)

// Option configures the server interceptors. Options are applied in order;
// a nil Option is skipped. An option given a value it cannot use makes
// UnaryServerInterceptor and StreamServerInterceptor panic with a message
// naming it, where the interceptor is registered. Everything core decides
// (the method table, default route, cost function, header style,
// anonymous callers) is configured on the gate.Gate instead.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config is what the options set, and the rules of the answers.
type config = rpcadapt.Config[codes.Code]

// newConfig applies opts, panicking as fn (the interceptor's constructor)
// when one is given a value it cannot use.
func newConfig(fn string, opts []Option) config {
	return rpcadapt.Configure("grpclimit."+fn, opts, Option.apply)
}

// WithFilter adds a filter; a call to fullMethod ("/pkg.Service/Method")
// is limited only if every filter returns true, and let through unchecked
// otherwise. Default: every call is limited. nil is an error.
func WithFilter(f func(ctx context.Context, fullMethod string) bool) Option {
	return optionFunc(func(c *config) error { return c.AddFilter("grpclimit.WithFilter", f) })
}

// WithDeniedCode sets the status code of a denial: codes.ResourceExhausted
// (the default) or codes.Unavailable, for clients that only retry
// Unavailable. Any other code is an error. The details and trailers are
// the same either way.
func WithDeniedCode(code codes.Code) Option {
	return optionFunc(func(c *config) error { return c.SetDeniedCode("grpclimit.WithDeniedCode", code) })
}

// WithDomain sets the ErrorInfo domain of a denial. Default "tollgate.dev";
// "" is an error.
func WithDomain(domain string) Option {
	return optionFunc(func(c *config) error { return c.SetDomain("grpclimit.WithDomain", domain) })
}

// WithMessageCost also charges every message received on a client-stream
// or bidi stream, cost tokens of class, on top of the charge when the
// stream opens. A denied message is not delivered: the handler's RecvMsg
// returns the denial's status error (with its details and trailers), which
// the handler should return. A class or cost the route table would refuse
// is an error. Default: messages are not charged.
func WithMessageCost(class string, cost int64) Option {
	return optionFunc(func(c *config) error { return c.SetMessageCost("grpclimit.WithMessageCost", class, cost) })
}

// WithErrorHandler sets a hook that receives the limiter's errors (store
// failures, invalid requests) for a call to fullMethod, for logs and
// metrics; the failure policy has already answered the call. It also
// receives the cause of a misconfiguration (a cost function's bad route),
// which the client never sees. Default: none (core logs degraded
// decisions). nil is an error.
func WithErrorHandler(h func(ctx context.Context, fullMethod string, err error)) Option {
	return optionFunc(func(c *config) error { return c.SetErrorHandler("grpclimit.WithErrorHandler", h) })
}
