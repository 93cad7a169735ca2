package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/httplimit"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

func TestStripMethod(t *testing.T) {
	for in, want := range map[string]string{
		"GET /v1/items/{id}": "/v1/items/{id}",
		"/v1/x":              "/v1/x",
		"POST \t /a":         "/a",
		"":                   "",
		"GET example.com/a":  "example.com/a",
	} {
		if got := httplimit.StripMethod(in); got != want {
			t.Errorf("StripMethod(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOptions(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	req := func(method, path, tenant string) *http.Request {
		return withTenant(httptest.NewRequest(method, path, nil), tenant)
	}
	t.Run("skipper", func(t *testing.T) {
		h := httplimit.Middleware(testkit.NewUnitGate(t, lim), httplimit.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/skip" }))(ok)
		for range 3 {
			if w := serve(h, req("GET", "/skip", "skipper")); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped request: %d %v", w.Code, w.Header())
			}
		}
		if w := serve(h, req("GET", "/other", "skipper")); w.Header().Get("RateLimit") == "" {
			t.Fatal("a request the skipper does not skip is not limited")
		}
	})
	t.Run("a cost func answering cost 0 is a 500, not a free pass", func(t *testing.T) {
		zero := func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "default", Cost: 0}, true
		}
		for name, h := range map[string]func(http.Handler, func(error)) http.Handler{
			"gate cost func": func(next http.Handler, hook func(error)) http.Handler {
				return httplimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithCostFunc(zero)), httplimit.WithErrorHandler(func(_ *http.Request, err error) { hook(err) }))(next)
			},
			"route func": func(next http.Handler, hook func(error)) http.Handler {
				return httplimit.Middleware(testkit.NewUnitGate(t, lim), httplimit.WithErrorHandler(func(_ *http.Request, err error) { hook(err) }),
					httplimit.WithRouteFunc(func(*http.Request) (gate.Route, bool) { return gate.Route{Class: "default", Cost: 0}, true }))(next)
			},
		} {
			var hooked error
			reached := 0
			w := serve(h(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }), func(err error) { hooked = err }), req("GET", "/x", "zero-"+name))
			if w.Code != 500 || reached != 0 || !errors.Is(hooked, core.ErrInvalidConfig) || w.Body.String() != string(misconfiguredBody) {
				t.Fatalf("%s: %d %q, handler reached %d times, hook %v", name, w.Code, w.Body, reached, hooked)
			}
		}
	})
	t.Run("route func comes before the gate's cost func and table", func(t *testing.T) {
		g := testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"/x": {Class: "default", Cost: 1}}), gate.
			WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
				return gate.Route{Class: "export", Cost: 3}, true
			}))
		h := httplimit.Middleware(g, httplimit.WithRouteFunc(func(r *http.Request) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 2}, r.Header.Get("X-Big") != ""
		}))(ok)
		r := req("GET", "/x", "costs")
		r.Header.Set("X-Big", "1")
		if got := serve(h, r).Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s, want 8", got)
		}
		if got := serve(h, req("GET", "/x", "costs")).Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s, want 5", got)
		}
	})
	t.Run("deny handler sees the verdict, headers already set", func(t *testing.T) {
		var got gate.Verdict
		h := httplimit.Middleware(testkit.NewUnitGate(t, lim), httplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, v gate.Verdict) {
			got = v
			if w.Header().Get("Retry-After") == "" {
				t.Error("Retry-After not set before the deny handler")
			}
			w.WriteHeader(http.StatusTeapot)
		}))(ok)
		for range 2 {
			serve(h, req("GET", "/", "deny"))
		}
		if w := serve(h, req("GET", "/", "deny")); w.Code != http.StatusTeapot || got.Status != 429 {
			t.Fatalf("deny handler: %d, verdict %+v", w.Code, got)
		}
	})
	t.Run("pattern func", func(t *testing.T) {
		h := httplimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"/items/:id": {Class: "export", Cost: 1}})),
			httplimit.WithPatternFunc(func(*http.Request) string { return "/items/:id" }))(ok)
		if got := serve(h, req("GET", "/items/7", "pattern")).Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
			t.Fatalf("policy %q", got)
		}
	})
	t.Run("ServeMux pattern, wrapped or inside", func(t *testing.T) {
		mw := httplimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithRoutes(gate.Routes{"GET /items/{id}": {Class: "export", Cost: 1}})))
		mux := http.NewServeMux()
		mux.Handle("GET /items/{id}", ok)
		inner := http.NewServeMux()
		inner.Handle("GET /items/{id}", mw(ok))
		for name, h := range map[string]http.Handler{"wrapping the mux": mw(mux), "inside the mux": inner} {
			if got := serve(h, req("GET", "/items/9", "mux-"+name)).Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
				t.Errorf("%s: policy %q", name, got)
			}
		}
	})
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
var misconfiguredBody = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`)

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	httplimit.Middleware(g, nil)
	for option, o := range map[string]httplimit.Option{
		"httplimit.WithSkipper":      httplimit.WithSkipper(nil),
		"httplimit.WithDenyHandler":  httplimit.WithDenyHandler(nil),
		"httplimit.WithErrorHandler": httplimit.WithErrorHandler(nil),
		"httplimit.WithPatternFunc":  httplimit.WithPatternFunc(nil),
		"httplimit.WithRouteFunc":    httplimit.WithRouteFunc(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: httplimit.Middleware: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			httplimit.Middleware(g, o)
		}()
	}
}
