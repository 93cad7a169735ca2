package echov5limit

import (
	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Echo v5 middleware that rate-limits requests with lim.
// Register it with e.Use (Echo runs Use middleware once the route is
// found, so c.Path() is the route template; not e.Pre, which runs before
// routing), on a group, or on a route; after the authentication
// middleware, which stores the verified tenant in the request context
// (c.SetRequest(c.Request().WithContext(core.ContextWithTenant(...)))):
// the tenant is never read from a header.
//
// For each request: skip (WithSkipper)? Otherwise ask core for a Verdict on
// (method, c.Path(), c.RealIP()), set its rate-limit headers on the
// response, and either call next or the deny handler. A request no route
// matches (the router's 404 or 405, or a RouteNotFound route such as the
// one a group's Use adds) is charged nothing and gets no headers; HEAD,
// which Echo answers 405 unless a HEAD route exists, is charged as the GET
// route of its path when one does. The headers are set
// before next runs, so they survive a handler that returns an error (Echo's
// HTTPErrorHandler writes its body under them).
//
// A bad configuration (nil limiter, invalid route table) never panics: the
// middleware reports the error to the error handler and denies every
// request with a 500 verdict (the deny handler writes it; by default a
// problem+json body). Check it at start-up with Validate.
func Middleware(lim *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	c := newConfig(opts)
	check := c.Checker(lim)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec *echo.Context) error {
			if c.Skipped(ec) {
				return next(ec)
			}
			req := ec.Request()
			v := check.Decide(req.Context(), ec, core.Endpoint{Method: req.Method, Pattern: ec.Path(), ClientIP: ec.RealIP(), Unmatched: unmatched(ec)})
			adapt.SetHeaders(ec.Response().Header(), v.Headers)
			if v.Proceed {
				defer v.Done() // frees a concurrency slot, panics included
				return next(ec)
			}
			return c.deny(ec, v)
		}
	}
}

// unmatched reports whether the router matched no route of the service for
// ec's request: Echo's 404 and 405, and RouteNotFound routes. Before
// routing (e.Pre) the route is unknown, not unmatched.
func unmatched(ec *echo.Context) bool {
	ri := ec.RouteInfo()
	return ri.Method == echo.RouteNotFound || ri.Name == echo.NotFoundRouteName || ri.Name == echo.MethodNotAllowedRouteName
}

func newConfig(opts []Option) *config {
	return adapt.Apply(&config{deny: DefaultDenyHandler}, opts, Option.apply)
}

// Validate reports whether Middleware(lim, opts...) is well configured.
func Validate(lim *core.Limiter, opts ...Option) error {
	_, err := newConfig(opts).NewGate(lim)
	return err
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body (the body of every tollgate adapter, richer than
// echo.ProblemError: it names the violated policies).
func DefaultDenyHandler(c *echo.Context, v core.Verdict) error {
	return c.Blob(v.Status, v.ContentType, v.Body)
}
