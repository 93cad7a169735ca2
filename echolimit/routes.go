package echolimit

import (
	"context"
	"net/http"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Echo v4 gives a middleware no sign of a request no route matched: c.Path()
// is then a RouteNotFound route's path (a group's Use registers "/v1/*"),
// the path of the node a 405 was found on, or empty. The adapter tells a
// match from these fallbacks by the routes the service registered, and a
// RouteNotFound route of the service (an SPA fallback, a reverse proxy)
// from the one a group's Use registers by its handler's name: Echo names a
// route after its handler, and a group's is Echo's NotFoundHandler.

// Echo's own handlers, as the package variables were before the service
// could change them: a service that sets echo.NotFoundHandler or
// echo.MethodNotAllowedHandler to a handler of its own answers what no
// route matches with its code.
var (
	notFoundName     = funcName(echo.NotFoundHandler)
	notFoundPC       = reflect.ValueOf(echo.NotFoundHandler).Pointer()
	methodNotAllowed = reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer()
)

// funcName is the name Echo gives a route of handler h.
func funcName(h echo.HandlerFunc) string {
	return runtime.FuncForPC(reflect.ValueOf(h).Pointer()).Name()
}

type routeKey struct{ host, method, path string }

// routeIndex is the set of (host, method, path) routes of one Echo
// instance; for a RouteNotFound route, whether its handler is the
// service's.
type routeIndex struct {
	e     *echo.Echo
	set   map[routeKey]bool
	built time.Time
}

// rebuildAfter bounds how often a miss rebuilds the index, so that a flood
// of unmatched requests does not rebuild it for each: a route registered
// after the last rebuild is known within a second.
const rebuildAfter = time.Second

// routeTable caches the index of the Echo instance the middleware serves.
type routeTable struct{ cur atomic.Pointer[routeIndex] }

func newRouteIndex(e *echo.Echo) *routeIndex {
	ix := &routeIndex{e: e, set: map[routeKey]bool{}, built: time.Now()}
	add := func(host string, rs []*echo.Route) {
		for _, r := range rs {
			ix.set[routeKey{host, r.Method, r.Path}] = r.Method == echo.RouteNotFound && r.Name != notFoundName
		}
	}
	add("", e.Router().Routes())
	for host, r := range e.Routers() {
		add(host, r.Routes())
	}
	return ix
}

// route is what the router did with a request: the route's path, whether
// no route of the service matched it, and whether a handler of the
// service answers it all the same (a RouteNotFound route of its own).
type route struct {
	path               string
	unmatched, service bool
}

// routeOf tells what the router did with ec's request. A middleware that
// runs before routing (e.Pre) sees no path: the router is asked.
func (t *routeTable) routeOf(ec echo.Context) route {
	e := ec.Echo()
	req := ec.Request()
	host := ""
	if _, ok := e.Routers()[req.Host]; ok {
		host = req.Host // the router Echo routes the request with
	}
	path, h := ec.Path(), ec.Handler()
	if path == "" {
		r := e.Router()
		if host != "" {
			r = e.Routers()[host]
		}
		fc := e.NewContext(req, nil)
		r.Find(req.Method, echo.GetPath(req), fc)
		path, h = fc.Path(), fc.Handler()
	}
	if path != "" {
		ix := t.index(e, routeKey{host, req.Method, path})
		if _, ok := ix.set[routeKey{host, req.Method, path}]; ok {
			return route{path: path}
		}
		if service, ok := ix.set[routeKey{host, echo.RouteNotFound, path}]; ok {
			return route{path: path, unmatched: true, service: service}
		}
	}
	// no route: Echo's NotFoundHandler or MethodNotAllowedHandler (unless
	// the service set its own), or the answer to OPTIONS on a route's path
	pc := reflect.ValueOf(h).Pointer()
	own := h == nil || pc == notFoundPC || pc == methodNotAllowed || (req.Method == http.MethodOptions && path != "")
	return route{path: path, unmatched: true, service: !own}
}

// index returns the index of e, rebuilt when it is another instance's, or
// when it lacks k and is older than rebuildAfter.
func (t *routeTable) index(e *echo.Echo, k routeKey) *routeIndex {
	ix := t.cur.Load()
	if ix != nil && ix.e == e {
		if _, ok := ix.set[k]; ok || time.Since(ix.built) < rebuildAfter {
			return ix
		}
	}
	ix = newRouteIndex(e)
	t.cur.Store(ix)
	return ix
}

// endpoint is what the gate decides ec's request on, in its context.
func (t *routeTable) endpoint(ec echo.Context) (context.Context, gate.Endpoint) {
	req, r := ec.Request(), t.routeOf(ec)
	return req.Context(), gate.Endpoint{Method: req.Method, Pattern: r.path, ClientIP: ec.RealIP(), Unmatched: r.unmatched, Fallback: r.service}
}

func setHeaders(ec echo.Context, hs []render.Header) { adapt.SetHeaders(ec.Response().Header(), hs) }

// setContext hands the handler the cost context, for gate.ReportCost.
func setContext(ec echo.Context, ctx context.Context) { ec.SetRequest(ec.Request().WithContext(ctx)) }
