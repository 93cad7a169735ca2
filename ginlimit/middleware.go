package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns Gin middleware that rate-limits requests with lim. Use
// it globally (engine.Use), per group (router.Group("/v1", mw)) or per
// route (router.GET(path, mw, handler)), after the authentication
// middleware, which stores the verified tenant in the request context
// (c.Request = c.Request.WithContext(core.ContextWithTenant(...))): the
// tenant is never read from a header.
//
// For each request: skip (WithSkipper)? Otherwise ask core for a Verdict
// on (method, c.FullPath(), c.ClientIP()), set its rate-limit headers, and
// either call c.Next or abort and call the deny handler. c.FullPath() is
// the route template ("/v1/items/:id"), never the raw URL; it is empty for
// a request no route matches (Gin's 404, or 405 with
// HandleMethodNotAllowed), which is charged nothing and gets no headers.
// Gin answers HEAD 404 unless a HEAD route exists; such a route is charged
// as the GET route of its path.
//
// A bad configuration (nil limiter, invalid route table) makes every
// request answer 500 with a problem+json body and report the error to the
// error handler; check it at start-up with Validate.
func Middleware(lim *core.Limiter, opts ...Option) gin.HandlerFunc {
	c := newConfig(opts)
	gate, err := c.NewGate(lim)
	if err != nil {
		body := adapt.Misconfigured.JSON()
		return func(gc *gin.Context) {
			c.Report(gc, err)
			gc.Abort()
			gc.Data(http.StatusInternalServerError, core.ProblemContentType, body)
		}
	}
	return func(gc *gin.Context) {
		if c.Skipped(gc) {
			gc.Next()
			return
		}
		path := gc.FullPath()
		v := gate.Decide(c.Context(gc.Request.Context(), gc), core.Endpoint{Method: gc.Request.Method, Pattern: path, ClientIP: gc.ClientIP(), Unmatched: path == ""})
		c.Report(gc, v.Err)
		adapt.SetHeaders(gc.Writer.Header(), v.Headers)
		if v.Proceed {
			defer v.Done() // frees a concurrency slot, panics included
			gc.Next()
			return
		}
		gc.Abort()
		c.deny(gc, v)
	}
}

// Validate reports whether Middleware(lim, opts...) is well configured.
func Validate(lim *core.Limiter, opts ...Option) error {
	_, err := newConfig(opts).NewGate(lim)
	return err
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c *gin.Context, v core.Verdict) {
	c.Data(v.Status, v.ContentType, v.Body)
}
