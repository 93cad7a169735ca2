package echov5limit

import (
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option, and an option given a nil value, is ignored.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	adapt.Config[*echo.Context]
	deny func(*echo.Context, core.Verdict) error
}

func gateOption(o core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(o) })
}

// WithRoutes sets the route table: "METHOD /path/:param" or "/path/:param"
// (Echo's c.Path()) to a class and cost. Default: none, so every route is
// the default route (class "default", cost 1). nil is ignored.
func WithRoutes(rs core.Routes) Option { return gateOption(core.WithRoutes(rs)) }

// WithDefaultRoute sets the class and cost of routes not in the table.
// Default: class "default", cost 1.
func WithDefaultRoute(r core.Route) Option { return gateOption(core.WithDefaultRoute(r)) }

// WithHeaderStyle selects the rate-limit header families. Default
// core.DefaultHeaderStyle (IETF draft-11 and X-RateLimit).
func WithHeaderStyle(s core.HeaderStyle) Option { return gateOption(core.WithHeaderStyle(s)) }

// WithAnonymous admits callers without a tenant in the request context as
// tenant "anonymous:<client IP>" on tier (default "anonymous"), instead of
// answering 401. The client IP is Echo's c.RealIP(), which in Echo v5 is
// the peer address unless e.IPExtractor says otherwise: use
// ExtractIPFromXFFHeader with your trusted proxies behind a proxy, and
// never echo.LegacyIPExtractor, which believes X-Forwarded-For and lets a
// client choose its own key. Default: off.
func WithAnonymous(tier string) Option { return gateOption(core.WithAnonymous(tier)) }

// WithGateOptions passes core gate options through (for example
// core.WithClock). Default: none.
func WithGateOptions(opts ...core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(opts...) })
}

// WithCostFunc sets a framework-neutral dynamic class/cost decision,
// consulted before the route table (ok false falls back to it). Default:
// none. nil is ignored.
func WithCostFunc(f core.CostFunc) Option {
	return optionFunc(func(c *config) { c.SetCostFunc(f) })
}

// WithEchoCostFunc sets a dynamic class/cost decision that sees the
// *echo.Context, consulted before WithCostFunc and the route table (ok
// false falls back to them). Default: none. nil is ignored.
func WithEchoCostFunc(f func(*echo.Context) (core.Route, bool)) Option {
	return optionFunc(func(c *config) { c.SetFrameworkCostFunc(f) })
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// and with the configuration error of a misconfigured middleware. Use it
// for logs and metrics. Default: none (core logs degraded decisions). nil
// is ignored.
func WithErrorHandler(f func(c *echo.Context, err error)) Option {
	return optionFunc(func(c *config) { c.SetOnError(f) })
}

// WithSkipper skips the limiter (no check, no headers) for requests it
// returns true for, like the Skipper of Echo's own middleware configs.
// Default: none (middleware.DefaultSkipper). nil is ignored.
func WithSkipper(s middleware.Skipper) Option {
	return optionFunc(func(c *config) { c.SetSkip(s) })
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400; 500 when the handler is misconfigured). The rate-limit
// headers are already set on the response, and they stay there if the
// handler returns an error instead of writing (an *echo.HTTPError,
// echo.ErrTooManyRequests, or an *echo.ProblemError for
// echo.ProblemDetailsHTTPErrorHandler), which Echo's HTTPErrorHandler
// renders. Default: DefaultDenyHandler (core's RFC 9457 problem+json, the
// body every tollgate adapter writes). nil is ignored.
func WithDenyHandler(f func(c *echo.Context, v core.Verdict) error) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.deny = f
		}
	})
}
