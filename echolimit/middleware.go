package echolimit

import (
	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Echo middleware that rate-limits requests with gate,
// built and validated once with gate.New (routes keyed by Echo's
// c.Path(), "METHOD /path/:param" or "/path/:param"; cost function; header
// style; anonymous callers, keyed by c.RealIP(): set e.IPExtractor
// (echo.ExtractIPDirect(), or ExtractIPFromXFFHeader with your trusted
// proxies), because without one Echo believes X-Forwarded-For and a client
// can choose its own key). Register it with e.Use (after routing: Echo runs Use middleware once the
// route is found, so c.Path() is the route template), on a group, or on a
// route; after the authentication middleware, which stores the verified
// tenant in the request context
// (c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(...)))):
// the tenant is never read from a header. It does not use Echo's
// RateLimiterStore, which has neither a context nor headers.
//
// For each request: skip (WithSkipper)? Otherwise ask the gate for a Verdict
// on (method, c.Path(), c.RealIP()), or on the route WithRouteFunc names, set its rate-limit headers on the
// response, and either call next or the deny handler. HEAD, which Echo
// answers 405 unless a HEAD route exists, is charged as the GET route of
// its path when one does. The headers are set before next runs, so they
// survive a handler that returns an error (Echo's HTTPErrorHandler writes
// its body under them).
//
// A request no route the service registered matches is charged as the
// default route when a handler of the service answers it
// (gate.Endpoint.Fallback): a RouteNotFound route the service registered
// (e.RouteNotFound("/*", spa), or a group's), or a handler the service
// set as echo.NotFoundHandler or echo.MethodNotAllowedHandler. Echo's own
// 404 or 405 (its handlers, a RouteNotFound route a group's Use adds) is
// charged nothing and gets no headers. Middleware (e.Use after the
// limiter, such as Static with HTML5) that answers such a request itself
// is not seen: register the fallback as a RouteNotFound route.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func Middleware(g *gate.Gate, opts ...Option) echo.MiddlewareFunc {
	c := adapt.New("echolimit.Middleware", g, DefaultDenyHandler, opts)
	endpoint := new(routeTable).endpoint
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error { return c.Serve(ec, endpoint, setHeaders, setContext, next) }
	}
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c echo.Context, v gate.Verdict) error {
	return c.Blob(v.Status, v.ContentType, v.Body)
}
