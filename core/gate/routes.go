package gate

import (
	"fmt"
	"strings"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Route is what a request costs: the class (bucket) it is charged to and how
// many tokens it takes.
type Route struct {
	Class string
	Cost  int64
	// Exempt routes are never limited (health checks, metrics).
	Exempt bool
}

// Routes maps a route to its class and cost. The pattern in a key is the
// framework's route template (Gin's FullPath, Echo's Path, Fiber's
// Route().Path, net/http's Pattern without the method) or a gRPC full
// method, never the raw URL, so path parameters cannot multiply classes.
// A key is one of:
//
//	"GET /v1/items/:id"        one HTTP method of a route
//	"/v1/items/:id"            every method of a route
//	"/pkg.Service/Method"      a gRPC method
//	"/pkg.Service/*"           every method of a gRPC service
//
// The service wildcard applies to gRPC endpoints only (Endpoint.Method
// empty); an exact key always wins over it. The same table serves an HTTP
// adapter and a gRPC one.
type Routes map[string]Route

// Validate reports the first bad entry, naming it.
func (rs Routes) Validate() error {
	for k, r := range rs {
		if strings.TrimSpace(k) == "" {
			return fmt.Errorf("%w: routes: empty route key", core.ErrInvalidConfig)
		}
		if err := validRoute(r); err != nil {
			return fmt.Errorf("%w: route %q: %v", core.ErrInvalidConfig, k, err)
		}
	}
	return nil
}

// validRoute reports what is wrong with r: an exempt route is always
// valid; any other needs a valid class name and 1 <= Cost <= quota.MaxCost
// (cost 0 would be a free peek). Route tables and CostFunc answers are
// held to the same rule.
func validRoute(r Route) error {
	if r.Exempt {
		return nil
	}
	if err := quota.ValidateName(r.Class); err != nil {
		return err
	}
	if r.Cost < 1 || r.Cost > quota.MaxCost {
		return fmt.Errorf("cost must be 1 to %d, got %d", int64(quota.MaxCost), r.Cost)
	}
	return nil
}

// Lookup returns the route of (method, pattern): "METHOD pattern" first,
// for HEAD then "GET pattern", then "pattern", then, for a gRPC endpoint
// (method empty) named "/pkg.Service/Method", the service's
// "/pkg.Service/*"; else ok false.
//
// HEAD is charged as GET: a framework that answers HEAD runs the GET
// route's handler for it (net/http's ServeMux, Fiber), or runs a HEAD route
// the service registered for the same resource, and a HEAD costs the
// server what the GET costs. A "HEAD pattern" key still wins.
func (rs Routes) Lookup(method, pattern string) (Route, bool) {
	if method != "" {
		if r, ok := rs[method+" "+pattern]; ok {
			return r, true
		}
		if method == "HEAD" {
			if r, ok := rs["GET "+pattern]; ok {
				return r, true
			}
		}
	}
	if r, ok := rs[pattern]; ok {
		return r, true
	}
	if method == "" {
		if svc, _, ok := splitFullMethod(pattern); ok {
			r, ok := rs["/"+svc+"/*"]
			return r, ok
		}
	}
	return Route{}, false
}

// Routed reports whether e reaches a handler of the service, which the
// gate then checks: a route of the service matched it (Unmatched false),
// or no route matched but a fallback handler of the service answers it
// (Fallback). A request that is neither, the framework's own 404 or 405,
// reaches no code of the service and proceeds unchecked.
//
// A catch-all is a handler: Gin's NoRoute and NoMethod handlers, Echo's
// RouteNotFound routes, a net/http ServeMux "/" pattern, a Fiber handler
// mounted with app.Use after the routes and gRPC's unknown-service
// handler all run the service's code, and a limiter that let them through
// unchecked would let a client spend the service's resources (a reverse
// proxy, a page render) without a quota.
func (e Endpoint) Routed() bool { return !e.Unmatched || e.Fallback }

// lookup returns the table's route of e: Lookup of its method and pattern,
// and none for a fallback, whose pattern names no route of the table (a
// catch-all is charged as the default route).
func (rs Routes) lookup(e Endpoint) (Route, bool) {
	if e.Fallback {
		return Route{}, false
	}
	return rs.Lookup(e.Method, e.Pattern)
}

// splitFullMethod splits a gRPC full method "/pkg.Service/Method" into its
// service and method; ok is false when s is not of that form.
func splitFullMethod(s string) (service, method string, ok bool) {
	if !strings.HasPrefix(s, "/") {
		return "", "", false
	}
	service, method, ok = strings.Cut(s[1:], "/")
	if !ok || service == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return service, method, true
}
