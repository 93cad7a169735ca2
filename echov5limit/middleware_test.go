package echov5limit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/labstack/echo/v5"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/echov5limit"
)

// as is a test authentication middleware: every request is tenant id.
func as(id string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			c.SetRequest(c.Request().WithContext(gate.ContextWithTenant(c.Request().Context(), quota.Tenant{ID: id})))
			return next(c)
		}
	}
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

// An error returned by the handler or by a deny handler is rendered by
// Echo v5's HTTPErrorHandler under the rate-limit headers, whichever error
// convention it follows: *echo.HTTPError, a sentinel (echo.ErrTooManyRequests
// is no *HTTPError in v5), or an *echo.ProblemError rendered by
// ProblemDetailsHTTPErrorHandler.
func TestHeadersSurviveEchoErrors(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	for _, tc := range []struct {
		name    string
		problem bool // e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler
		deny    func(*echo.Context, gate.Verdict) error
		wantCT  string
	}{
		{name: "http-error", deny: func(_ *echo.Context, v gate.Verdict) error { return echo.NewHTTPError(v.Status, v.Problem.Title) },
			wantCT: echo.MIMEApplicationJSON},
		{name: "sentinel", deny: func(*echo.Context, gate.Verdict) error { return echo.ErrTooManyRequests },
			wantCT: echo.MIMEApplicationJSON},
		{name: "problem-error", problem: true, wantCT: echo.MIMEApplicationProblemJSON,
			deny: func(_ *echo.Context, v gate.Verdict) error {
				return &echo.ProblemError{Status: v.Status, Title: v.Problem.Title, Detail: v.Problem.Detail}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			if tc.problem {
				e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
			}
			reached := 0
			e.Use(as(tc.name), echov5limit.Middleware(testkit.NewUnitGate(t, lim), echov5limit.WithDenyHandler(tc.deny)))
			e.GET("/", func(c *echo.Context) error {
				if reached++; reached == 1 {
					return echo.NewHTTPError(http.StatusBadGateway, "upstream down")
				}
				return c.NoContent(http.StatusOK)
			})
			if w := serve(e, "GET", "/"); w.Code != http.StatusBadGateway || w.Header().Get("RateLimit") != `"default";r=1;t=100` {
				t.Fatalf("handler error: %d %v", w.Code, w.Header())
			}
			serve(e, "GET", "/")
			w := serve(e, "GET", "/")
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "100" ||
				w.Header().Get("X-RateLimit-Remaining") != "0" || w.Header().Get("Content-Type") != tc.wantCT || reached != 2 {
				t.Fatalf("denied: %d %v, handler reached %d", w.Code, w.Header(), reached)
			}
		})
	}
}

// The default deny handler writes core's problem, not Echo's: the body
// names the violated policy.
func TestDefaultDenyHandler(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	e := echo.New()
	e.Use(as("default-deny"), echov5limit.Middleware(testkit.NewUnitGate(t, lim)))
	e.GET("/", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	var w *httptest.ResponseRecorder
	for range 3 {
		w = serve(e, "GET", "/")
	}
	var p render.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 429 || w.Header().Get("Content-Type") != render.ProblemContentType ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "default" {
		t.Fatalf("%d %v %s (%v)", w.Code, w.Header(), w.Body, err)
	}
}

func TestOptions(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	ok := func(c *echo.Context) error { return c.NoContent(http.StatusOK) }
	t.Run("skipper", func(t *testing.T) {
		e := echo.New()
		e.Use(as("skipper"), echov5limit.Middleware(testkit.NewUnitGate(t, lim), echov5limit.WithSkipper(func(c *echo.Context) bool { return c.Path() == "/skip" })))
		e.GET("/skip", ok)
		e.GET("/limited", ok)
		for range 3 {
			if w := serve(e, "GET", "/skip"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped: %d %v", w.Code, w.Header())
			}
		}
		if w := serve(e, "GET", "/limited"); w.Header().Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("not skipped: %d %v", w.Code, w.Header())
		}
	})
	t.Run("route func before the gate's cost func", func(t *testing.T) {
		e := echo.New()
		e.Use(as("cost"), echov5limit.Middleware(testkit.NewUnitGate(t, lim, gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 3}, true
		})), echov5limit.WithRouteFunc(func(c *echo.Context) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 2}, c.QueryParam("big") != ""
		})))
		e.GET("/x", ok)
		if got := serve(e, "GET", "/x?big=1").Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s", got)
		}
		if got := serve(e, "GET", "/x").Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s", got)
		}
	})
	t.Run("template on a group", func(t *testing.T) {
		e := echo.New()
		g := e.Group("/v1", as("group"), echov5limit.Middleware(testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /v1/items/:id": {Class: "export", Cost: 1}}))))
		g.GET("/items/:id", ok)
		for _, id := range []string{"4", "5"} {
			if got := serve(e, "GET", "/v1/items/"+id).Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
				t.Fatalf("policy %q", got)
			}
		}
	})
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
const misconfiguredBody = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`

// A route function's bad route is the misconfiguration answer: 500 with
// the fixed problem+json body, the cause only for the error hook.
func TestMisconfigured(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	bad := echov5limit.WithRouteFunc(func(*echo.Context) (gate.Route, bool) { return gate.Route{Class: "a b", Cost: 1}, true })
	var hooked error
	e := echo.New()
	e.Use(as("t"), echov5limit.Middleware(testkit.NewUnitGate(t, lim), nil, echov5limit.WithErrorHandler(func(_ *echo.Context, err error) { hooked = err }), bad))
	e.GET("/", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	w := serve(e, "GET", "/")
	if w.Code != 500 || w.Header().Get("Content-Type") != render.ProblemContentType || w.Body.String() != misconfiguredBody || !errors.Is(hooked, core.ErrInvalidConfig) {
		t.Fatalf("bad route: %d %v %q, hook got %v", w.Code, w.Header(), w.Body, hooked)
	}
}

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	echov5limit.Middleware(g, nil)
	for option, o := range map[string]echov5limit.Option{
		"echov5limit.WithRouteFunc":    echov5limit.WithRouteFunc(nil),
		"echov5limit.WithSkipper":      echov5limit.WithSkipper(nil),
		"echov5limit.WithDenyHandler":  echov5limit.WithDenyHandler(nil),
		"echov5limit.WithErrorHandler": echov5limit.WithErrorHandler(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: echov5limit.Middleware: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			echov5limit.Middleware(g, o)
		}()
	}
}

// What the router falls back to when no route matches (a group's
// RouteNotFound routes, its 404 and 405) is charged nothing; before
// routing (e.Pre) the route is unknown, not unmatched, and is charged as
// the default route.
func TestRouteMatching(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	gt := testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /v1/items/:id": {Class: "export", Cost: 1}}))
	t.Run("group", func(t *testing.T) {
		e := echo.New()
		v1 := e.Group("/v1", as("group"), echov5limit.Middleware(gt))
		v1.GET("/items/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		if w := serve(e, "GET", "/v1/items/3"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"export";q=10;w=1000` {
			t.Fatalf("route: %d %v", w.Code, w.Header())
		}
		for range 5 { // the default bucket holds 2: a charge would deny
			for _, target := range []string{"/v1/nowhere", "/v1/", "/v1"} {
				if w := serve(e, "GET", target); w.Code != 404 || w.Header().Get("RateLimit") != "" {
					t.Fatalf("GET %s: %d %v", target, w.Code, w.Header())
				}
			}
			if w := serve(e, "POST", "/v1/items/3"); (w.Code != 404 && w.Code != 405) || w.Header().Get("RateLimit") != "" {
				t.Fatalf("POST: %d %v", w.Code, w.Header())
			}
		}
	})
	t.Run("pre", func(t *testing.T) {
		e := echo.New()
		e.Pre(as("pre"), echov5limit.Middleware(gt))
		e.GET("/v1/items/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		if w := serve(e, "GET", "/v1/items/3"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` {
			t.Fatalf("before routing: %d %v", w.Code, w.Header())
		}
	})
}

// A handler of the service that Echo v5 runs for a request no route
// matches is charged as the default route (a bucket of 2 here): a
// RouteNotFound route of the service, and the not-found handler the service
// set in RouterConfig. A group's own RouteNotFound route answers Echo's 404
// unchecked when the limiter is the group's last middleware; under e.Use,
// or with middleware after the limiter, it is charged too, unless
// NoGroupAutoRegister404Routes keeps the group from adding it.
func TestCatchAll(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim)
	pass := func(next echo.HandlerFunc) echo.HandlerFunc { return func(c *echo.Context) error { return next(c) } }
	spa := func(reached *int) echo.HandlerFunc {
		return func(c *echo.Context) error { *reached++; return c.NoContent(http.StatusOK) }
	}
	charged := func(t *testing.T, e *echo.Echo, path string, reached *int, handler bool) {
		t.Helper()
		for i := range 2 {
			w := serve(e, "GET", path)
			if w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` || (handler && (w.Code != 200 || *reached != i+1)) {
				t.Fatalf("request %d to %s: %d %v, reached %d times", i+1, path, w.Code, w.Header(), *reached)
			}
		}
		if w := serve(e, "GET", path); w.Code != 429 || (handler && *reached != 2) {
			t.Fatalf("on an empty bucket: %d, reached %d times", w.Code, *reached)
		}
	}
	free := func(t *testing.T, e *echo.Echo, path string) {
		t.Helper()
		for range 3 {
			if w := serve(e, "GET", path); w.Code != 404 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("Echo's 404 for %s: %d %v", path, w.Code, w.Header())
			}
		}
	}
	t.Run("global", func(t *testing.T) {
		e := echo.New()
		e.Use(as("global"), echov5limit.Middleware(g))
		reached := 0
		e.RouteNotFound("/*", spa(&reached))
		charged(t, e, "/app/page", &reached, true)
	})
	t.Run("group", func(t *testing.T) {
		e := echo.New()
		v1 := e.Group("/v1", as("group"), echov5limit.Middleware(g))
		reached := 0
		v1.RouteNotFound("/*", spa(&reached))
		charged(t, e, "/v1/nowhere", &reached, true)
	})
	t.Run("RouterConfig.NotFoundHandler", func(t *testing.T) {
		reached := 0
		e := echo.NewWithConfig(echo.Config{Router: echo.NewRouter(echo.RouterConfig{NotFoundHandler: spa(&reached)})})
		e.Use(as("config"), echov5limit.Middleware(g))
		e.GET("/open", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		charged(t, e, "/nowhere", &reached, true)
	})
	t.Run("RouterConfig.MethodNotAllowedHandler", func(t *testing.T) {
		reached := 0
		e := echo.NewWithConfig(echo.Config{Router: echo.NewRouter(echo.RouterConfig{MethodNotAllowedHandler: spa(&reached)})})
		e.Use(as("config405"), echov5limit.Middleware(g))
		e.GET("/open", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		for i := range 2 {
			if w := serve(e, "POST", "/open"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` || reached != i+1 {
				t.Fatalf("request %d: %d %v, reached %d times", i+1, w.Code, w.Header(), reached)
			}
		}
		if w := serve(e, "POST", "/open"); w.Code != 429 || reached != 2 {
			t.Fatalf("on an empty bucket: %d, reached %d times", w.Code, reached)
		}
	})
	t.Run("a group's own, the limiter last in the group", func(t *testing.T) {
		e := echo.New()
		e.Group("/v1", as("own"), echov5limit.Middleware(g))
		free(t, e, "/v1/nowhere")
	})
	t.Run("a group's own, middleware after the limiter", func(t *testing.T) {
		e := echo.New()
		e.Group("/v1", as("after"), echov5limit.Middleware(g), pass)
		charged(t, e, "/v1/nowhere", new(int), false)
	})
	t.Run("a group's own, under e.Use", func(t *testing.T) {
		e := echo.New()
		e.Use(as("use"), echov5limit.Middleware(g))
		e.Group("/v1", pass)
		charged(t, e, "/v1/nowhere", new(int), false)
		free(t, e, "/nowhere") // outside the group: the router's 404
	})
	t.Run("NoGroupAutoRegister404Routes, under e.Use", func(t *testing.T) {
		e := echo.NewWithConfig(echo.Config{NoGroupAutoRegister404Routes: true})
		e.Use(as("noauto"), echov5limit.Middleware(g))
		e.Group("/v1", pass).GET("/items/:id", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		free(t, e, "/v1/nowhere")
	})
}
