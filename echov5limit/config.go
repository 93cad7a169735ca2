package echov5limit

import (
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option is skipped. An option given a value it cannot use (a nil
// function) makes Middleware panic with a message naming it, where the
// limiter is registered. Everything core decides (routes, default route,
// cost function, header style, anonymous callers) is configured on the
// gate.Gate instead.
type Option = adapt.Option[*echo.Context, denyHandler]

type denyHandler = func(*echo.Context, gate.Verdict) error

// WithRouteFunc sets how a request's class and cost are named from the
// *echo.Context (c.Param values, a key the authentication middleware set),
// consulted before the gate's cost function and route table (ok false
// falls back to them). Its answer is held to the route table's rules: a
// bad one is answered as a misconfiguration. Default: none. nil is an error.
func WithRouteFunc(f func(*echo.Context) (gate.Route, bool)) Option {
	return adapt.RouteFunc[*echo.Context, denyHandler]("echov5limit.WithRouteFunc", f)
}

// WithSkipper skips the limiter (no check, no headers) for requests it
// returns true for, like the Skipper of Echo's own middleware configs.
// Default: none (middleware.DefaultSkipper). nil is an error.
func WithSkipper(s middleware.Skipper) Option {
	return adapt.Skipper[*echo.Context, denyHandler]("echov5limit.WithSkipper", s)
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400; 500 when misconfigured). The rate-limit headers are
// already set on the response, and they stay there if the handler returns
// an error instead of writing (an *echo.HTTPError rendered by Echo's
// HTTPErrorHandler). Default: DefaultDenyHandler (core's RFC 9457
// problem+json, the body every tollgate adapter writes). nil is an error.
func WithDenyHandler(f func(c *echo.Context, v gate.Verdict) error) Option {
	return adapt.DenyHandler[*echo.Context, denyHandler]("echov5limit.WithDenyHandler", f)
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// and with the cause of a misconfiguration (a route function's
// bad route), which the client never sees. Use it for logs and metrics.
// Default: none (core logs degraded decisions). nil is an error.
func WithErrorHandler(f func(c *echo.Context, err error)) Option {
	return adapt.ErrorHandler[*echo.Context, denyHandler]("echov5limit.WithErrorHandler", f)
}
