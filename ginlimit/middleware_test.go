package ginlimit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/ginlimit"
)

func ok(c *gin.Context) { c.Status(http.StatusOK) }

func TestMounting(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /v1/items/:id": {Class: "export", Cost: 1}}))
	t.Run("group", func(t *testing.T) {
		r := gin.New()
		r.Use(tenant("group"))
		v1 := r.Group("/v1", ginlimit.Middleware(g))
		v1.GET("/items/:id", ok)
		r.GET("/open", ok)
		if got := get(r, "GET", "/v1/items/3").Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
			t.Fatalf("group route: policy %q", got)
		}
		if got := get(r, "GET", "/open").Header().Get("RateLimit"); got != "" {
			t.Fatalf("a route outside the group is limited: %q", got)
		}
	})
	t.Run("unmatched route is charged nothing", func(t *testing.T) {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(tenant("unmatched"), ginlimit.Middleware(g))
		r.GET("/v1/items/:id", ok)
		for range 5 { // the default bucket holds 2: a charge would deny
			for _, c := range []struct {
				method, path string
				status       int
			}{{"GET", "/nowhere/1", 404}, {"POST", "/v1/items/1", 405}} {
				w := get(r, c.method, c.path)
				if w.Code != c.status || w.Header().Get("RateLimit-Policy") != "" || w.Header().Get("RateLimit") != "" {
					t.Fatalf("%s %s: %d %v", c.method, c.path, w.Code, w.Header())
				}
			}
		}
	})
}

// A handler of the service that Gin runs for a request no route matches
// is charged as the default route (a bucket of 2 here): the NoRoute and
// NoMethod handlers, a limiter mounted in the NoRoute chain itself, and
// global middleware used after the limiter (it may answer, as a static
// file server does). Only with the limiter last does Gin answer itself,
// unchecked.
func TestCatchAll(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim)
	next := func(c *gin.Context) { c.Next() }
	for _, c := range []struct {
		name         string
		build        func(r *gin.Engine, reached *int)
		method, path string
	}{
		{"NoRoute", func(r *gin.Engine, reached *int) {
			r.Use(tenant("noroute"), ginlimit.Middleware(g))
			r.NoRoute(func(c *gin.Context) { *reached++; c.Status(http.StatusOK) })
		}, "GET", "/app/anything"},
		{"NoMethod", func(r *gin.Engine, reached *int) {
			r.HandleMethodNotAllowed = true
			r.Use(tenant("nomethod"), ginlimit.Middleware(g))
			r.NoMethod(func(c *gin.Context) { *reached++; c.Status(http.StatusOK) })
		}, "POST", "/v1/items/1"},
		{"limiter in the NoRoute chain", func(r *gin.Engine, reached *int) {
			r.Use(tenant("inchain"))
			r.NoRoute(ginlimit.Middleware(g), func(c *gin.Context) { *reached++; c.Status(http.StatusOK) })
		}, "GET", "/app/anything"},
		{"middleware after the limiter", func(r *gin.Engine, reached *int) {
			r.Use(tenant("after"), ginlimit.Middleware(g), func(c *gin.Context) { *reached++; c.Next() })
		}, "GET", "/nowhere"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := gin.New()
			reached := 0
			c.build(r, &reached)
			r.GET("/v1/items/:id", ok)
			for i := range 2 {
				w := get(r, c.method, c.path)
				if w.Code == 429 || w.Header().Get("RateLimit-Policy") != `"default";q=2;w=200` || reached != i+1 {
					t.Fatalf("request %d: %d %v, reached %d times", i+1, w.Code, w.Header(), reached)
				}
			}
			if w := get(r, c.method, c.path); w.Code != 429 || reached != 2 {
				t.Fatalf("on an empty bucket: %d, reached %d times", w.Code, reached)
			}
		})
	}
	t.Run("Gin's own 404 and 405 with the limiter last", func(t *testing.T) {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(next, tenant("own"), ginlimit.Middleware(g))
		r.NoMethod() // none set: Gin's 405
		r.GET("/v1/items/:id", ok)
		for range 3 {
			for _, c := range []struct {
				method, path string
				status       int
			}{{"GET", "/nowhere", 404}, {"POST", "/v1/items/1", 405}} {
				if w := get(r, c.method, c.path); w.Code != c.status || w.Header().Get("RateLimit-Policy") != "" {
					t.Fatalf("%s %s: %d %v", c.method, c.path, w.Code, w.Header())
				}
			}
		}
	})
	t.Run("route func prices a catch-all", func(t *testing.T) {
		r := gin.New()
		r.Use(tenant("priced"), ginlimit.Middleware(g, ginlimit.WithRouteFunc(func(c *gin.Context) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 4}, c.FullPath() == ""
		})))
		r.NoRoute(ok)
		if got := get(r, "GET", "/app").Header().Get("X-RateLimit-Remaining"); got != "6" {
			t.Fatalf("remaining %q, want 6 of export's 10", got)
		}
	})
}

func TestOptions(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim)
	t.Run("skipper", func(t *testing.T) {
		r := gin.New()
		r.Use(tenant("skipper"), ginlimit.Middleware(g, ginlimit.WithSkipper(func(c *gin.Context) bool { return c.FullPath() == "/skip" })))
		r.GET("/skip", ok)
		for range 3 {
			if w := get(r, "GET", "/skip"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped: %d %v", w.Code, w.Header())
			}
		}
	})
	t.Run("route func before the gate's cost func", func(t *testing.T) {
		r := gin.New()
		costly := testkit.NewUnitGate(t, lim, gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 3}, true
		}))
		r.Use(tenant("cost"), ginlimit.Middleware(costly, ginlimit.WithRouteFunc(func(c *gin.Context) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 2}, c.Query("big") != ""
		})))
		r.GET("/x", ok)
		if got := get(r, "GET", "/x?big=1").Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s", got)
		}
		if got := get(r, "GET", "/x").Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s", got)
		}
	})
	t.Run("a route func answering cost 0 is a 500, not a free pass", func(t *testing.T) {
		var hooked error
		reached := 0
		r := gin.New()
		r.Use(tenant("zero"), ginlimit.Middleware(g, ginlimit.WithErrorHandler(func(_ *gin.Context, err error) { hooked = err }),
			ginlimit.WithRouteFunc(func(*gin.Context) (gate.Route, bool) { return gate.Route{Class: "default", Cost: 0}, true })))
		r.GET("/x", func(c *gin.Context) { reached++ })
		w := get(r, "GET", "/x")
		if w.Code != 500 || reached != 0 || !errors.Is(hooked, core.ErrInvalidConfig) || w.Body.String() != misconfiguredBody {
			t.Fatalf("%d %q, handler reached %d times, hook %v", w.Code, w.Body, reached, hooked)
		}
	})
	t.Run("deny handler, chain aborted", func(t *testing.T) {
		reached := 0
		r := gin.New()
		r.Use(tenant("deny"), ginlimit.Middleware(g, ginlimit.WithDenyHandler(func(c *gin.Context, v gate.Verdict) {
			if !c.IsAborted() || c.Writer.Header().Get("Retry-After") == "" {
				t.Error("deny handler called before abort or before the headers")
			}
			c.String(http.StatusTeapot, "slow down")
		})))
		r.GET("/", func(c *gin.Context) { reached++ })
		for range 2 {
			get(r, "GET", "/")
		}
		if w := get(r, "GET", "/"); w.Code != http.StatusTeapot || reached != 2 {
			t.Fatalf("deny: %d, handler reached %d times", w.Code, reached)
		}
	})
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
const misconfiguredBody = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	ginlimit.Middleware(g, nil)
	for option, o := range map[string]ginlimit.Option{
		"ginlimit.WithRouteFunc":    ginlimit.WithRouteFunc(nil),
		"ginlimit.WithSkipper":      ginlimit.WithSkipper(nil),
		"ginlimit.WithDenyHandler":  ginlimit.WithDenyHandler(nil),
		"ginlimit.WithErrorHandler": ginlimit.WithErrorHandler(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: ginlimit.Middleware: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			ginlimit.Middleware(g, o)
		}()
	}
}
