package echov5limit

import (
	"context"
	"net/http"
	"net/url"
	"reflect"

	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Echo v5 routes a request no route of the service matches to a
// RouteNotFound route (the service's own, or one a group's Use adds, which
// runs the router's not-found handler), or to the router's not-found or
// method-not-allowed handler (Echo's, unless the service set its own in
// echo.RouterConfig). The adapter charges the request unless it can tell
// that Echo's own handler answers it.

// echoHandlers are the code of the default router's not-found,
// method-not-allowed and OPTIONS handlers.
var echoHandlers = defaultHandlers()

// defaultHandlers asks a router with the default configuration which
// handlers answer a request no route matches, one whose method no route of
// its path serves, and an OPTIONS request: Echo does not export them.
func defaultHandlers() map[uintptr]bool {
	e := echo.New()
	r := echo.NewRouter(echo.RouterConfig{})
	if _, err := r.Add(echo.Route{Method: http.MethodGet, Path: "/r", Handler: func(*echo.Context) error { return nil }}); err != nil {
		panic(err) // a fixed, valid route
	}
	hs := map[uintptr]bool{}
	for _, q := range []struct{ method, path string }{{http.MethodGet, "/none"}, {http.MethodPost, "/r"}, {http.MethodOptions, "/r"}} {
		c := e.NewContext(&http.Request{Method: q.method, URL: &url.URL{Path: q.path}}, nil)
		hs[reflect.ValueOf(r.Route(c)).Pointer()] = true
	}
	return hs
}

// isEcho reports whether h is one of the default router's handlers for
// what no route matches.
func isEcho(h echo.HandlerFunc) bool {
	return h != nil && echoHandlers[reflect.ValueOf(h).Pointer()]
}

// route is what the router did with a request: whether no route of the
// service matched it, and whether a handler of the service answers it all
// the same.
type route struct{ unmatched, service bool }

// routeOf tells what the router did with ec's request; wrapsEcho is set
// when the handler this middleware wraps is Echo's own not-found handler
// (the middleware is the last one of a group's RouteNotFound route). Before
// routing (e.Pre) the route is unknown: it is charged as the default route.
func routeOf(ec *echo.Context, wrapsEcho bool) route {
	ri := ec.RouteInfo()
	switch {
	case ri.Method == echo.RouteNotFound:
		// a group's Use adds RouteNotFound routes that run the router's
		// not-found handler under the group's middleware; Echo does not
		// say which routes those are, so only a middleware that wraps the
		// not-found handler itself can tell
		return route{unmatched: true, service: !wrapsEcho}
	case ri.Name == echo.NotFoundRouteName || ri.Name == echo.MethodNotAllowedRouteName:
		// the router's own handler, unless the service configured one:
		// ask the router which it is
		req := *ec.Request() // Route sets the request's Pattern
		c := ec.Echo().NewContext(&req, nil)
		return route{unmatched: true, service: !isEcho(ec.Echo().Router().Route(c))}
	}
	return route{}
}

// endpointFunc returns what the gate decides a request on, in its context;
// wrapsEcho is set when the middleware wraps Echo's own not-found handler
// (a group's RouteNotFound route, with the middleware last).
func endpointFunc(wrapsEcho bool) func(*echo.Context) (context.Context, gate.Endpoint) {
	return func(ec *echo.Context) (context.Context, gate.Endpoint) {
		req, r := ec.Request(), routeOf(ec, wrapsEcho)
		return req.Context(), gate.Endpoint{Method: req.Method, Pattern: ec.Path(), ClientIP: ec.RealIP(), Unmatched: r.unmatched, Fallback: r.service}
	}
}

func setHeaders(ec *echo.Context, hs []render.Header) { adapt.SetHeaders(ec.Response().Header(), hs) }

// setContext hands the handler the cost context, for gate.ReportCost.
func setContext(ec *echo.Context, ctx context.Context) { ec.SetRequest(ec.Request().WithContext(ctx)) }
