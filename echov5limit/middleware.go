package echov5limit

import (
	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Echo v5 middleware that rate-limits requests with
// gate, built and validated once with gate.New (routes keyed by Echo's
// c.Path(), "METHOD /path/:param" or "/path/:param"; cost function; header
// style; anonymous callers, keyed by c.RealIP(), which in Echo v5 is the
// peer address unless e.IPExtractor says otherwise: use
// ExtractIPFromXFFHeader with your trusted proxies behind a proxy, and
// never echo.LegacyIPExtractor, which believes X-Forwarded-For and lets a
// client choose its own key). Register it with e.Use (Echo runs Use middleware once the route is
// found, so c.Path() is the route template; not e.Pre, which runs before
// routing), on a group, or on a route; after the authentication
// middleware, which stores the verified tenant in the request context
// (c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(...)))):
// the tenant is never read from a header.
//
// For each request: skip (WithSkipper)? Otherwise ask the gate for a Verdict
// on (method, c.Path(), c.RealIP()), or on the route WithRouteFunc names, set its rate-limit headers on the
// response, and either call next or the deny handler. HEAD, which Echo
// answers 405 unless a HEAD route exists, is charged as the GET route of
// its path when one does. The headers are set before next runs, so they
// survive a handler that returns an error (Echo's HTTPErrorHandler writes
// its body under them).
//
// A request no route of the service matches is charged as the default
// route when a handler of the service answers it (gate.Endpoint.Fallback):
// a RouteNotFound route (e.RouteNotFound("/*", spa), or a group's), or
// the not-found or method-not-allowed handler the service set in
// echo.RouterConfig. The router's own 404 or 405 is charged nothing and
// gets no headers, and so is the RouteNotFound route a group's Use adds
// when the limiter is the group's last middleware (v1.Use(auth, limiter)).
// Under e.Use, Echo v5 does not tell the routes a group's Use adds from
// the service's own: the limiter charges both, so an unknown path under a
// group with middleware costs a request of the default route there; mount
// the limiter on the group, or set echo.Config.NoGroupAutoRegister404Routes,
// to keep those 404s free. Middleware that answers such a request itself
// (Static with HTML5 under e.Use) is not seen: register the fallback as a
// RouteNotFound route.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func Middleware(g *gate.Gate, opts ...Option) echo.MiddlewareFunc {
	c := adapt.New("echov5limit.Middleware", g, DefaultDenyHandler, opts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		endpoint := endpointFunc(isEcho(next))
		return func(ec *echo.Context) error { return c.Serve(ec, endpoint, setHeaders, setContext, next) }
	}
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body (the body of every tollgate adapter, richer than
// echo.ProblemError: it names the violated policies).
func DefaultDenyHandler(c *echo.Context, v gate.Verdict) error {
	return c.Blob(v.Status, v.ContentType, v.Body)
}
