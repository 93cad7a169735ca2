package ginlimit

import (
	"context"
	"reflect"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// The glue adapt's Config.Serve runs a Gin request with.

// endpointFunc returns what the gate decides a request on, in its context;
// *self is the code of the limiter's handler.
func endpointFunc(self *uintptr) func(*gin.Context) (context.Context, gate.Endpoint) {
	return func(gc *gin.Context) (context.Context, gate.Endpoint) {
		path := gc.FullPath()
		e := gate.Endpoint{Method: gc.Request.Method, Pattern: path, ClientIP: gc.ClientIP(), Unmatched: path == ""}
		if e.Unmatched {
			// Gin's chain for a request no route matches is the global
			// middleware, then the NoRoute (or NoMethod) handlers: when
			// its last handler is a limiter, no code of the service runs
			// after it, and Gin answers 404 or 405 itself
			e.Fallback = funcPC(gc.Handler()) != *self
		}
		return gc.Request.Context(), e
	}
}

func funcPC(h gin.HandlerFunc) uintptr { return reflect.ValueOf(h).Pointer() }

func setHeaders(gc *gin.Context, hs []render.Header) { adapt.SetHeaders(gc.Writer.Header(), hs) }

// setContext hands the handler the cost context, for gate.ReportCost.
func setContext(gc *gin.Context, ctx context.Context) { gc.Request = gc.Request.WithContext(ctx) }

func next(gc *gin.Context) error {
	gc.Next()
	return nil
}

// abortFirst returns deny run after the chain is aborted: no handler after
// the limiter runs.
func abortFirst(deny denyHandler) denyHandler {
	return func(gc *gin.Context, v gate.Verdict) {
		gc.Abort()
		deny(gc, v)
	}
}
