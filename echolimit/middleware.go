package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Echo middleware that rate-limits requests with lim.
// Register it with e.Use (after routing: Echo runs Use middleware once the
// route is found, so c.Path() is the route template), on a group, or on a
// route; after the authentication middleware, which stores the verified
// tenant in the request context
// (c.SetRequest(c.Request().WithContext(core.ContextWithTenant(...)))):
// the tenant is never read from a header. It does not use Echo's
// RateLimiterStore, which has neither a context nor headers.
//
// For each request: skip (WithSkipper)? Otherwise ask core for a Verdict on
// (method, c.Path(), c.RealIP()), set its rate-limit headers on the
// response, and either call next or the deny handler. A request no route
// the service registered matches (Echo's 404 or 405, a RouteNotFound
// route such as the one a group's Use adds) is charged nothing and gets
// no headers; HEAD, which Echo answers 405 unless a HEAD route exists, is
// charged as the GET route of its path when one does. The headers are set
// before next runs, so they survive a handler that returns an error
// (Echo's HTTPErrorHandler writes its body under them).
//
// A bad configuration (nil limiter, invalid route table) makes every
// request answer 500 with a problem+json body and report the error to the
// error handler; check it at start-up with Validate.
func Middleware(lim *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	c := newConfig(opts)
	gate, err := c.NewGate(lim)
	if err != nil {
		body := adapt.Misconfigured.JSON()
		return func(echo.HandlerFunc) echo.HandlerFunc {
			return func(ec echo.Context) error {
				c.Report(ec, err)
				return ec.Blob(http.StatusInternalServerError, core.ProblemContentType, body)
			}
		}
	}
	var routes routeTable
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			if c.Skipped(ec) {
				return next(ec)
			}
			req := ec.Request()
			path, matched := routes.matched(ec)
			v := gate.Decide(c.Context(req.Context(), ec), core.Endpoint{Method: req.Method, Pattern: path, ClientIP: ec.RealIP(), Unmatched: !matched})
			c.Report(ec, v.Err)
			adapt.SetHeaders(ec.Response().Header(), v.Headers)
			if v.Proceed {
				defer v.Done() // frees a concurrency slot, panics included
				return next(ec)
			}
			return c.deny(ec, v)
		}
	}
}

// Validate reports whether Middleware(lim, opts...) is well configured.
func Validate(lim *core.Limiter, opts ...Option) error {
	_, err := newConfig(opts).NewGate(lim)
	return err
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c echo.Context, v core.Verdict) error {
	return c.Blob(v.Status, v.ContentType, v.Body)
}
