package ginlimit

import (
	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Gin middleware that rate-limits requests with gate,
// built and validated once with gate.New (routes keyed by Gin's
// FullPath, "METHOD /path/:param" or "/path/:param"; cost function; header
// style; anonymous callers, keyed by c.ClientIP(): configure the engine's
// trusted proxies, or a client can choose its own key with
// X-Forwarded-For). Use it globally (engine.Use), per group
// (router.Group("/v1", mw)) or per route (router.GET(path, mw, handler)),
// after the authentication middleware, which stores the verified tenant in
// the request context (c.Request =
// c.Request.WithContext(gate.ContextWithTenant(...))): the tenant is never
// read from a header.
//
// For each request: skip (WithSkipper)? Otherwise ask the gate for a
// Verdict on (method, c.FullPath(), c.ClientIP()), or on the route
// WithRouteFunc names, set its rate-limit headers, and either call c.Next
// or abort and call the deny handler. c.FullPath() is the route template
// ("/v1/items/:id"), never the raw URL. Gin answers HEAD 404 unless a HEAD
// route exists; such a route is charged as the GET route of its path.
//
// c.FullPath() is empty for a request no route matches, which Gin hands
// to the engine's global middleware and then to the NoRoute handlers (the
// NoMethod ones for a 405 with HandleMethodNotAllowed). When handlers run
// after the limiter for it (a NoRoute or NoMethod handler: an SPA
// fallback, a reverse proxy; or global middleware used after the
// limiter, which may answer it, as a static file server does), the
// request is charged as the default route (gate.Endpoint.Fallback). When
// the limiter is the last handler, Gin answers 404 or 405 itself: the
// request is charged nothing and gets no headers. So use the limiter last
// among the global middleware, or Gin's own 404s are charged too.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func Middleware(g *gate.Gate, opts ...Option) gin.HandlerFunc {
	c := adapt.New("ginlimit.Middleware", g, DefaultDenyHandler, opts)
	c.Deny = abortFirst(c.Deny)
	var self uintptr // the code of mw, the same for every limiter
	endpoint := endpointFunc(&self)
	mw := func(gc *gin.Context) { _ = c.Serve(gc, endpoint, setHeaders, setContext, next) }
	self = funcPC(mw)
	return mw
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c *gin.Context, v gate.Verdict) {
	c.Data(v.Status, v.ContentType, v.Body)
}
