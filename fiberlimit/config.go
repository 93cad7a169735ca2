package fiberlimit

import (
	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option, and an option given a nil value, is ignored.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	adapt.Config[*fiber.Ctx]
	pattern func(*fiber.Ctx) string
	deny    func(*fiber.Ctx, core.Verdict) error
}

func newConfig(opts []Option) *config {
	return adapt.Apply(&config{deny: DefaultDenyHandler}, opts, Option.apply)
}

func gateOption(o core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(o) })
}

// WithRoutes sets the route table: "METHOD /path/:param" or "/path/:param"
// (Fiber's c.Route().Path) to a class and cost. Default: none, so every
// route is the default route (class "default", cost 1). nil is ignored.
func WithRoutes(rs core.Routes) Option { return gateOption(core.WithRoutes(rs)) }

// WithDefaultRoute sets the class and cost of routes not in the table.
// Default: class "default", cost 1.
func WithDefaultRoute(r core.Route) Option { return gateOption(core.WithDefaultRoute(r)) }

// WithCostFunc sets a framework-neutral dynamic class/cost decision,
// consulted before the route table (ok false falls back to it). Default:
// none. nil is ignored.
func WithCostFunc(f core.CostFunc) Option {
	return optionFunc(func(c *config) { c.SetCostFunc(f) })
}

// WithFiberCostFunc sets a dynamic class/cost decision that sees the
// *fiber.Ctx, consulted before WithCostFunc and the route table (ok false
// falls back to them). It must not keep the context or strings from it.
// Default: none. nil is ignored.
func WithFiberCostFunc(f func(*fiber.Ctx) (core.Route, bool)) Option {
	return optionFunc(func(c *config) { c.SetFrameworkCostFunc(f) })
}

// WithNext skips the limiter (no check, no headers) for requests it returns
// true for, like the Next field of Fiber's own middleware configs. Default:
// none. nil is ignored.
func WithNext(f func(c *fiber.Ctx) bool) Option {
	return optionFunc(func(c *config) { c.SetSkip(f) })
}

// WithPatternFunc sets how the route template of a request is found.
// Never return the raw URL path: every distinct path would be a route of
// its own. The string is used during the call only. Default:
// c.Route().Path. nil is ignored.
func WithPatternFunc(f func(c *fiber.Ctx) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.pattern = f
		}
	})
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400). The rate-limit headers are already set. Default:
// DefaultDenyHandler (core's RFC 9457 problem+json). nil is ignored.
func WithDenyHandler(f func(c *fiber.Ctx, v core.Verdict) error) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.deny = f
		}
	})
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// and with the configuration error of a misconfigured middleware. Use it
// for logs and metrics. Default: none (core logs degraded decisions). nil
// is ignored.
func WithErrorHandler(f func(c *fiber.Ctx, err error)) Option {
	return optionFunc(func(c *config) { c.SetOnError(f) })
}

// WithHeaderStyle selects the rate-limit header families. Default
// core.DefaultHeaderStyle (IETF draft-11 and X-RateLimit).
func WithHeaderStyle(s core.HeaderStyle) Option { return gateOption(core.WithHeaderStyle(s)) }

// WithAnonymous admits callers without a tenant as tenant
// "anonymous:<client IP>" on tier (default "anonymous"), instead of
// answering 401. The client IP is Fiber's c.IP(): when Config.ProxyHeader
// is set, also set EnableTrustedProxyCheck and TrustedProxies, or a client
// can choose its own key. Default: off.
func WithAnonymous(tier string) Option { return gateOption(core.WithAnonymous(tier)) }

// WithGateOptions passes core gate options through (for example
// core.WithClock). Default: none.
func WithGateOptions(opts ...core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(opts...) })
}
