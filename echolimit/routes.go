package echolimit

import (
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// Echo v4 gives a middleware no sign of a request no route matched: c.Path()
// is then a RouteNotFound route's path (a group's Use registers "/v1/*"),
// the path of the node a 405 was found on, or empty. The adapter tells a
// match from these fallbacks by the routes the service registered.

type routeKey struct{ method, path string }

// routeIndex is the set of (method, path) routes of one Echo instance.
type routeIndex struct {
	e     *echo.Echo
	set   map[routeKey]struct{}
	built time.Time
}

// rebuildAfter bounds how often a miss rebuilds the index, so that a flood
// of unmatched requests does not rebuild it for each: a route registered
// after the last rebuild is known within a second.
const rebuildAfter = time.Second

// routeTable caches the index of the Echo instance the middleware serves.
type routeTable struct{ cur atomic.Pointer[routeIndex] }

func newRouteIndex(e *echo.Echo) *routeIndex {
	ix := &routeIndex{e: e, set: map[routeKey]struct{}{}, built: time.Now()}
	add := func(rs []*echo.Route) {
		for _, r := range rs {
			if r.Method != echo.RouteNotFound {
				ix.set[routeKey{r.Method, r.Path}] = struct{}{}
			}
		}
	}
	add(e.Router().Routes())
	for _, r := range e.Routers() {
		add(r.Routes())
	}
	return ix
}

// matched reports whether the router matched a route the service
// registered for ec's request, and that route's path. A middleware that
// runs before routing (e.Pre) sees no path: the router is asked.
func (t *routeTable) matched(ec echo.Context) (string, bool) {
	e := ec.Echo()
	req := ec.Request()
	path := ec.Path()
	if path == "" {
		r := e.Router()
		if hr, ok := e.Routers()[req.Host]; ok {
			r = hr
		}
		fc := e.NewContext(req, nil)
		r.Find(req.Method, echo.GetPath(req), fc)
		if path = fc.Path(); path == "" {
			return "", false
		}
	}
	k := routeKey{req.Method, path}
	ix := t.cur.Load()
	if ix != nil && ix.e == e {
		if _, ok := ix.set[k]; ok {
			return path, true
		}
		if time.Since(ix.built) < rebuildAfter {
			return path, false
		}
	}
	ix = newRouteIndex(e)
	t.cur.Store(ix)
	_, ok := ix.set[k]
	return path, ok
}
