package fiberv3limit

import (
	"github.com/gofiber/fiber/v3"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the handler. Options are applied in order; a nil
// Option is skipped. An option given a value it cannot use (a nil
// function) makes New panic with a message naming it, where the
// limiter is registered. Everything core decides (routes, default route,
// cost function, header style, anonymous callers) is configured on the
// gate.Gate instead.
type Option = adapt.Option[fiber.Ctx, denyHandler]

type denyHandler = func(fiber.Ctx, gate.Verdict) error

// WithRouteFunc sets how a request's class and cost are named from the
// fiber.Ctx (c.Params values, a local the authentication middleware set),
// consulted before the gate's cost function and route table (ok false
// falls back to them). It must not keep the context or strings from it.
// Its answer is held to the route table's rules: a bad one is answered as
// a misconfiguration. Default: none. nil is an error.
func WithRouteFunc(f func(fiber.Ctx) (gate.Route, bool)) Option {
	return adapt.RouteFunc[fiber.Ctx, denyHandler]("fiberv3limit.WithRouteFunc", f)
}

// WithNext skips the limiter (no check, no headers) for requests it returns
// true for, like the Next field of Fiber's own middleware configs. Default:
// none. nil is an error.
func WithNext(f func(c fiber.Ctx) bool) Option {
	return adapt.Skipper[fiber.Ctx, denyHandler]("fiberv3limit.WithNext", f)
}

// WithPatternFunc sets how the route template of a request is found, for
// a handler mounted with app.Use or app.Group, where c.Route().Path is the mount prefix. Never return the raw URL path: every distinct path would be a
// route of its own. The string is used during the call only. Default:
// c.Route().Path. nil is an error.
func WithPatternFunc(f func(c fiber.Ctx) string) Option {
	return adapt.PatternFunc[fiber.Ctx, denyHandler]("fiberv3limit.WithPatternFunc", f)
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400; 500 when misconfigured). The rate-limit headers are
// already set, and they stay if the handler returns an error instead of
// writing (a *fiber.Error such as fiber.ErrTooManyRequests), which the
// app's ErrorHandler renders. Default: DefaultDenyHandler (core's RFC 9457
// problem+json, the body every tollgate adapter writes). nil is an error.
func WithDenyHandler(f func(c fiber.Ctx, v gate.Verdict) error) Option {
	return adapt.DenyHandler[fiber.Ctx, denyHandler]("fiberv3limit.WithDenyHandler", f)
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// and with the cause of a misconfiguration (a route function's
// bad route), which the client never sees. Use it for logs and metrics.
// Default: none (core logs degraded decisions). nil is an error.
func WithErrorHandler(f func(c fiber.Ctx, err error)) Option {
	return adapt.ErrorHandler[fiber.Ctx, denyHandler]("fiberv3limit.WithErrorHandler", f)
}
