package echolimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/echolimit"
)

// The headers are on the response before the handler runs, so an
// *echo.HTTPError from the handler, or from a deny handler, keeps them.
func TestHeadersSurviveHTTPError(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	t.Run("handler error", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("handler-error"), echolimit.Middleware(testkit.NewUnitGate(t, lim)))
		e.GET("/", func(echo.Context) error { return echo.NewHTTPError(http.StatusBadGateway, "upstream down") })
		w := get(e, "GET", "/")
		if w.Code != http.StatusBadGateway || w.Header().Get("RateLimit") != `"default";r=1;t=100` || w.Header().Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	})
	t.Run("deny handler error", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("deny-error"), echolimit.Middleware(testkit.NewUnitGate(t, lim), echolimit.WithDenyHandler(func(c echo.Context, v gate.Verdict) error {
			return echo.NewHTTPError(v.Status, v.Problem.Title)
		})))
		reached := 0
		e.GET("/", func(c echo.Context) error { reached++; return nil })
		for range 2 {
			get(e, "GET", "/")
		}
		w := get(e, "GET", "/")
		if w.Code != 429 || w.Header().Get("Retry-After") != "100" || w.Header().Get("RateLimit") == "" || reached != 2 {
			t.Fatalf("%d %v, handler reached %d", w.Code, w.Header(), reached)
		}
	})
}

func TestOptions(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	t.Run("skipper", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("skipper"), echolimit.Middleware(testkit.NewUnitGate(t, lim), echolimit.WithSkipper(func(c echo.Context) bool { return c.Path() == "/skip" })))
		e.GET("/skip", ok)
		for range 3 {
			if w := get(e, "GET", "/skip"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped: %d %v", w.Code, w.Header())
			}
		}
	})
	t.Run("route func before the gate's cost func", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("cost"), echolimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 3}, true
		})), echolimit.WithRouteFunc(func(c echo.Context) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 2}, c.QueryParam("big") != ""
		})))
		e.GET("/x", ok)
		if got := get(e, "GET", "/x?big=1").Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s", got)
		}
		if got := get(e, "GET", "/x").Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s", got)
		}
	})
	t.Run("route template", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("template"), echolimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /items/:id": {Class: "export", Cost: 1}}))))
		e.GET("/items/:id", ok)
		if got := get(e, "GET", "/items/4").Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
			t.Fatalf("policy %q", got)
		}
	})
}

// A bad route from the gate's cost function or the route function is the
// fixed 500 misconfiguration answer, never a free pass.
func TestCostFuncValidated(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	zero := func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
		return gate.Route{Class: "default", Cost: 0}, true
	}
	for name, mw := range map[string]func(hook func(echo.Context, error)) echo.MiddlewareFunc{
		"gate cost func": func(hook func(echo.Context, error)) echo.MiddlewareFunc {
			return echolimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithCostFunc(zero)), echolimit.WithErrorHandler(hook))
		},
		"route func": func(hook func(echo.Context, error)) echo.MiddlewareFunc {
			return echolimit.Middleware(testkit.NewUnitGate(t, lim), echolimit.WithErrorHandler(hook),
				echolimit.WithRouteFunc(func(echo.Context) (gate.Route, bool) { return gate.Route{Class: "bad class", Cost: 1}, true }))
		},
	} {
		var hooked error
		reached := 0
		e := echo.New()
		e.Use(tenant("zero-"+name), mw(func(_ echo.Context, err error) { hooked = err }))
		e.GET("/x", func(c echo.Context) error { reached++; return c.NoContent(http.StatusOK) })
		w := get(e, "GET", "/x")
		if w.Code != 500 || reached != 0 || !errors.Is(hooked, core.ErrInvalidConfig) || w.Body.String() != misconfiguredBody {
			t.Fatalf("%s: %d %q, handler reached %d times, hook %v", name, w.Code, w.Body, reached, hooked)
		}
	}
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
const misconfiguredBody = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	echolimit.Middleware(g, nil)
	for option, o := range map[string]echolimit.Option{
		"echolimit.WithRouteFunc":    echolimit.WithRouteFunc(nil),
		"echolimit.WithSkipper":      echolimit.WithSkipper(nil),
		"echolimit.WithDenyHandler":  echolimit.WithDenyHandler(nil),
		"echolimit.WithErrorHandler": echolimit.WithErrorHandler(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: echolimit.Middleware: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			echolimit.Middleware(g, o)
		}()
	}
}

// A request is charged by the route the service registered; what Echo's
// router falls back to when none matches (a group's RouteNotFound routes,
// a 405, no path) is charged nothing, wherever the middleware is mounted.
func TestRouteMatching(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /v1/items/:id": {Class: "export", Cost: 1}}))
	check := func(t *testing.T, e *echo.Echo, host string) {
		t.Helper()
		req := httptest.NewRequest("GET", "/v1/items/3", nil)
		req.Host = host
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"export";q=10;w=1000` {
			t.Fatalf("route: %d %v", w.Code, w.Header())
		}
		for range 5 { // the default bucket holds 2: a charge would deny
			// a group's RouteNotFound route answers 404 where the router
			// alone answers the POST 405
			for _, c := range []struct{ method, path string }{{"GET", "/v1/nowhere"}, {"GET", "/nowhere"}, {"POST", "/v1/items/3"}} {
				req := httptest.NewRequest(c.method, c.path, nil)
				req.Host = host
				w := httptest.NewRecorder()
				e.ServeHTTP(w, req)
				if (w.Code != 404 && w.Code != 405) || w.Header().Get("RateLimit") != "" {
					t.Fatalf("%s %s: %d %v", c.method, c.path, w.Code, w.Header())
				}
			}
		}
	}
	t.Run("group", func(t *testing.T) {
		e := echo.New()
		v1 := e.Group("/v1", tenant("group"), echolimit.Middleware(g))
		v1.GET("/items/:id", ok)
		check(t, e, "example.com")
	})
	t.Run("host", func(t *testing.T) {
		e := echo.New()
		api := e.Host("api.test", tenant("host"), echolimit.Middleware(g))
		api.GET("/v1/items/:id", ok)
		check(t, e, "api.test")
	})
	// e.Pre runs before routing, where c.Path() is empty: the adapter asks
	// the router, so the route is still charged as itself
	t.Run("pre", func(t *testing.T) {
		e := echo.New()
		e.Pre(tenant("pre"), echolimit.Middleware(g))
		e.GET("/v1/items/:id", ok)
		check(t, e, "example.com")
	})
}

// A handler of the service that Echo runs for a request no route matches
// is charged as the default route (a bucket of 2 here): a RouteNotFound
// route of the service, wherever the limiter is mounted, and a handler the
// service set as echo.NotFoundHandler. The RouteNotFound routes a group's
// Use adds answer Echo's own 404, unchecked, beside them.
func TestCatchAll(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim)
	spa := func(reached *int) echo.HandlerFunc {
		return func(c echo.Context) error { *reached++; return c.NoContent(http.StatusOK) }
	}
	check := func(t *testing.T, e *echo.Echo, host, path string, reached *int) {
		t.Helper()
		send := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest("GET", path, nil)
			req.Host = host
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			return w
		}
		for i := range 2 {
			if w := send(); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` || *reached != i+1 {
				t.Fatalf("request %d to %s: %d %v, reached %d times", i+1, path, w.Code, w.Header(), *reached)
			}
		}
		if w := send(); w.Code != 429 || *reached != 2 {
			t.Fatalf("on an empty bucket: %d, reached %d times", w.Code, *reached)
		}
	}
	t.Run("global, beside a group's own", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("global"), echolimit.Middleware(g))
		v1 := e.Group("/v1", func(next echo.HandlerFunc) echo.HandlerFunc { return next }) // adds RouteNotFound /v1/*
		v1.GET("/items/:id", ok)
		reached := 0
		e.RouteNotFound("/*", spa(&reached))
		for range 3 {
			if w := get(e, "GET", "/v1/nowhere"); w.Code != 404 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("the group's 404: %d %v", w.Code, w.Header())
			}
		}
		check(t, e, "example.com", "/app/page", &reached)
	})
	t.Run("group", func(t *testing.T) {
		e := echo.New()
		v1 := e.Group("/v1", tenant("group"), echolimit.Middleware(g))
		reached := 0
		v1.RouteNotFound("/*", spa(&reached))
		check(t, e, "example.com", "/v1/nowhere", &reached)
	})
	t.Run("host", func(t *testing.T) {
		e := echo.New()
		e.Use(tenant("host"), echolimit.Middleware(g))
		api := e.Host("api.test")
		reached := 0
		api.RouteNotFound("/*", spa(&reached))
		e.GET("/open", ok)
		if w := get(e, "GET", "/nowhere"); w.Code != 404 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("another host's 404: %d %v", w.Code, w.Header())
		}
		check(t, e, "api.test", "/nowhere", &reached)
	})
	t.Run("pre", func(t *testing.T) {
		e := echo.New()
		e.Pre(tenant("pre"), echolimit.Middleware(g))
		reached := 0
		e.RouteNotFound("/*", spa(&reached))
		check(t, e, "example.com", "/nowhere", &reached)
	})
	t.Run("echo.MethodNotAllowedHandler set by the service", func(t *testing.T) {
		reached := 0
		defer func(h echo.HandlerFunc) { echo.MethodNotAllowedHandler = h }(echo.MethodNotAllowedHandler)
		echo.MethodNotAllowedHandler = spa(&reached)
		e := echo.New()
		e.Use(tenant("var405"), echolimit.Middleware(g))
		e.GET("/open", ok)
		for i := range 2 {
			if w := get(e, "POST", "/open"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` || reached != i+1 {
				t.Fatalf("request %d: %d %v, reached %d times", i+1, w.Code, w.Header(), reached)
			}
		}
		if w := get(e, "POST", "/open"); w.Code != 429 || reached != 2 {
			t.Fatalf("on an empty bucket: %d, reached %d times", w.Code, reached)
		}
	})
	t.Run("echo.NotFoundHandler set by the service", func(t *testing.T) {
		reached := 0
		defer func(h echo.HandlerFunc) { echo.NotFoundHandler = h }(echo.NotFoundHandler)
		echo.NotFoundHandler = spa(&reached)
		e := echo.New()
		e.Use(tenant("var"), echolimit.Middleware(g))
		e.GET("/open", ok)
		check(t, e, "example.com", "/nowhere", &reached)
	})
}
