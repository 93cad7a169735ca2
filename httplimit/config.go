package httplimit

import (
	"net/http"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option, and an option given a nil value, is ignored.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	adapt.Config[*http.Request]
	pattern func(*http.Request) string
	deny    func(http.ResponseWriter, *http.Request, core.Verdict)
}

func newConfig(opts []Option) *config {
	return adapt.Apply(&config{deny: DefaultDenyHandler}, opts, Option.apply)
}

func gateOption(o core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(o) })
}

// WithRoutes sets the route table: "METHOD /pattern" or "/pattern" (the
// ServeMux pattern without its method, e.g. "/v1/items/{id}") to a class and
// cost. Default: none, so every route is the default route (class
// "default", cost 1). nil is ignored.
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

// WithRequestCostFunc sets a dynamic class/cost decision that sees the
// request, consulted before WithCostFunc and the route table (ok false falls
// back to them). Default: none. nil is ignored.
func WithRequestCostFunc(f func(*http.Request) (core.Route, bool)) Option {
	return optionFunc(func(c *config) { c.SetFrameworkCostFunc(f) })
}

// WithSkipper skips the limiter (no check, no headers) for requests it
// returns true for. Default: none. nil is ignored.
func WithSkipper(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.SetSkip(f) })
}

// WithPatternFunc sets how the route template of a request is found, for
// routers other than ServeMux (chi: chi.RouteContext(r.Context()).RoutePattern(),
// with the middleware mounted where the route is resolved). Never return the
// raw URL path: every distinct path would be a route of its own. Default:
// when the middleware wraps a *http.ServeMux directly, the pattern that mux
// routes r to (a request it has none for, its 404 or 405, is charged
// nothing); otherwise r.Pattern without its method. nil is ignored.
func WithPatternFunc(f func(*http.Request) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.pattern = f
		}
	})
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400). The rate-limit headers are already set on w. Default:
// DefaultDenyHandler (core's RFC 9457 problem+json). nil is ignored.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, v core.Verdict)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.deny = f
		}
	})
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// before the failure policy's answer is rendered; and with the
// configuration error of a misconfigured middleware. Use it for logs and
// metrics. Default: none (core logs degraded decisions). nil is ignored.
func WithErrorHandler(f func(r *http.Request, err error)) Option {
	return optionFunc(func(c *config) { c.SetOnError(f) })
}

// WithHeaderStyle selects the rate-limit header families. Default
// core.DefaultHeaderStyle (IETF draft-11 and X-RateLimit).
func WithHeaderStyle(s core.HeaderStyle) Option { return gateOption(core.WithHeaderStyle(s)) }

// WithAnonymous admits callers without a tenant in the request context as
// tenant "anonymous:<client IP>" on tier (default "anonymous"), instead of
// answering 401. The client IP is the host of r.RemoteAddr: put a trusted
// proxy-header middleware in front if the service is behind a proxy.
// Default: off.
func WithAnonymous(tier string) Option { return gateOption(core.WithAnonymous(tier)) }

// WithGateOptions passes core gate options through (for example
// core.WithClock). Default: none.
func WithGateOptions(opts ...core.GateOption) Option {
	return optionFunc(func(c *config) { c.AddGate(opts...) })
}
