package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
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
	lim := conformance.NewUnitLimiter(t)
	req := func(method, path, tenant string) *http.Request {
		return withTenant(httptest.NewRequest(method, path, nil), tenant)
	}
	t.Run("skipper", func(t *testing.T) {
		h := httplimit.Middleware(lim, httplimit.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/skip" }))(ok)
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
		for name, opt := range map[string]httplimit.Option{
			"neutral": httplimit.WithCostFunc(func(context.Context, core.Tenant, core.Endpoint) (core.Route, bool) {
				return core.Route{Class: "default", Cost: 0}, true
			}),
			"request": httplimit.WithRequestCostFunc(func(*http.Request) (core.Route, bool) { return core.Route{Class: "default", Cost: 0}, true }),
		} {
			var hooked error
			reached := 0
			h := httplimit.Middleware(lim, opt, httplimit.WithErrorHandler(func(_ *http.Request, err error) { hooked = err }))(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
			w := serve(h, req("GET", "/x", "zero-"+name))
			if w.Code != 500 || reached != 0 || !errors.Is(hooked, core.ErrInvalidConfig) {
				t.Fatalf("%s: %d, handler reached %d times, hook %v", name, w.Code, reached, hooked)
			}
		}
	})
	t.Run("request cost func comes before the neutral one and the table", func(t *testing.T) {
		h := httplimit.Middleware(lim,
			httplimit.WithRoutes(core.Routes{"/x": {Class: "default", Cost: 1}}),
			httplimit.WithCostFunc(func(context.Context, core.Tenant, core.Endpoint) (core.Route, bool) {
				return core.Route{Class: "export", Cost: 3}, true
			}),
			httplimit.WithRequestCostFunc(func(r *http.Request) (core.Route, bool) {
				return core.Route{Class: "export", Cost: 2}, r.Header.Get("X-Big") != ""
			}))(ok)
		r := req("GET", "/x", "costs")
		r.Header.Set("X-Big", "1")
		if got := serve(h, r).Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("request cost func: remaining %s, want 8", got)
		}
		if got := serve(h, req("GET", "/x", "costs")).Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("neutral cost func: remaining %s, want 5", got)
		}
	})
	t.Run("deny handler sees the verdict, headers already set", func(t *testing.T) {
		var got core.Verdict
		h := httplimit.Middleware(lim, httplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, v core.Verdict) {
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
		h := httplimit.Middleware(lim,
			httplimit.WithRoutes(core.Routes{"/items/:id": {Class: "export", Cost: 1}}),
			httplimit.WithPatternFunc(func(*http.Request) string { return "/items/:id" }))(ok)
		if got := serve(h, req("GET", "/items/7", "pattern")).Header().Get("RateLimit-Policy"); got != `"export";q=10;w=1000` {
			t.Fatalf("policy %q", got)
		}
	})
	t.Run("ServeMux pattern, wrapped or inside", func(t *testing.T) {
		mw := httplimit.Middleware(lim, httplimit.WithRoutes(core.Routes{"GET /items/{id}": {Class: "export", Cost: 1}}))
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

func TestMisconfigured(t *testing.T) {
	lim := conformance.NewUnitLimiter(t)
	bad := httplimit.WithRoutes(core.Routes{"/x": {Class: "no spaces", Cost: 1}})
	if err := httplimit.Validate(lim, bad); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("Validate(bad routes) = %v", err)
	}
	if err := httplimit.Validate(nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("Validate(nil limiter) = %v", err)
	}
	if err := httplimit.Validate(lim, nil, httplimit.WithRoutes(nil), httplimit.WithCostFunc(nil), httplimit.WithSkipper(nil),
		httplimit.WithDenyHandler(nil), httplimit.WithErrorHandler(nil), httplimit.WithPatternFunc(nil), httplimit.WithRequestCostFunc(nil)); err != nil {
		t.Fatalf("nil options are not ignored: %v", err)
	}
	var hooked error
	h := httplimit.Middleware(nil, httplimit.WithErrorHandler(func(_ *http.Request, err error) { hooked = err }))(ok)
	w := serve(h, withTenant(httptest.NewRequest("GET", "/", nil), "t"))
	if w.Code != 500 || w.Header().Get("Content-Type") != core.ProblemContentType || !errors.Is(hooked, core.ErrInvalidConfig) {
		t.Fatalf("misconfigured middleware answered %d %v, hook got %v", w.Code, w.Header(), hooked)
	}
}
