package ginlimit

import (
	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option is skipped. An option given a value it cannot use (a nil
// function) makes Middleware panic with a message naming it, where the
// limiter is registered. Everything core decides (routes, default route,
// cost function, header style, anonymous callers) is configured on the
// gate.Gate instead.
type Option = adapt.Option[*gin.Context, denyHandler]

type denyHandler = func(*gin.Context, gate.Verdict)

// WithRouteFunc sets how a request's class and cost are named from the
// *gin.Context (c.Param values, a key the authentication middleware set),
// consulted before the gate's cost function and route table (ok false
// falls back to them). Its answer is held to the route table's rules: a
// bad one is answered as a misconfiguration. Default: none. nil is an error.
func WithRouteFunc(f func(*gin.Context) (gate.Route, bool)) Option {
	return adapt.RouteFunc[*gin.Context, denyHandler]("ginlimit.WithRouteFunc", f)
}

// WithSkipper skips the limiter (no check, no headers) for requests it
// returns true for. Default: none. nil is an error.
func WithSkipper(f func(*gin.Context) bool) Option {
	return adapt.Skipper[*gin.Context, denyHandler]("ginlimit.WithSkipper", f)
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400; 500 when misconfigured). The rate-limit headers are
// already set, and the chain is already aborted. Default:
// DefaultDenyHandler (core's RFC 9457 problem+json). nil is an error.
func WithDenyHandler(f func(c *gin.Context, v gate.Verdict)) Option {
	return adapt.DenyHandler[*gin.Context, denyHandler]("ginlimit.WithDenyHandler", f)
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// and with the cause of a misconfiguration (a route function's
// bad route), which the client never sees. Use it for logs and metrics
// (c.Error(err) adds it to Gin's error list). Default: none (core logs
// degraded decisions). nil is an error.
func WithErrorHandler(f func(c *gin.Context, err error)) Option {
	return adapt.ErrorHandler[*gin.Context, denyHandler]("ginlimit.WithErrorHandler", f)
}
