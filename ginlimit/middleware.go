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
// ("/v1/items/:id"), never the raw URL; it is empty for a request no route
// matches (Gin's 404, or 405 with HandleMethodNotAllowed), which is charged
// nothing and gets no headers. Gin answers HEAD 404 unless a HEAD route
// exists; such a route is charged as the GET route of its path.
//
// A nil gate does not panic: every request is answered as misconfigured
// (500 with a fixed problem+json body), the cause reported to the error
// handler only.
func Middleware(g *gate.Gate, opts ...Option) gin.HandlerFunc {
	c := adapt.New(g, DefaultDenyHandler, opts)
	return func(gc *gin.Context) {
		if c.Skipped(gc) {
			gc.Next()
			return
		}
		path := gc.FullPath()
		v := c.Decide(gc.Request.Context(), gc, gate.Endpoint{Method: gc.Request.Method, Pattern: path, ClientIP: gc.ClientIP(), Unmatched: path == ""})
		adapt.SetHeaders(gc.Writer.Header(), v.Headers)
		if v.Proceed {
			defer v.Done() // frees a concurrency slot and settles the reported cost, panics included
			if ctx, ok := v.CostContext(gc.Request.Context()); ok {
				gc.Request = gc.Request.WithContext(ctx) // the handler may gate.ReportCost its actual cost
			}
			gc.Next()
			return
		}
		gc.Abort()
		c.Deny(gc, v)
	}
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c *gin.Context, v gate.Verdict) {
	c.Data(v.Status, v.ContentType, v.Body)
}
