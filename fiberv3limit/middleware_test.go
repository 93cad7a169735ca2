package fiberv3limit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/tollgate-go/tollgate/core"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// as is a test authentication handler: every request is tenant id.
func as(id string) fiber.Handler {
	return func(c fiber.Ctx) error {
		fiberv3limit.SetTenant(c, quota.Tenant{ID: id})
		return c.Next()
	}
}

func ok(c fiber.Ctx) error { return c.SendStatus(http.StatusOK) }

func serve(app *fiber.App, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	adaptor.FiberApp(app)(w, httptest.NewRequest(method, target, nil))
	return w
}

// What the package documents: Fiber v3 runs app.Use and group handlers
// before the final route is matched, so c.Route().Path there is the mount
// prefix; on a route it is the template. If Fiber changes this, this test
// says so.
func TestRouteUnderUseIsTheMountPrefix(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	var seen []string
	limit := fiberv3limit.New(testkit.NewUnitGate(t, lim), fiberv3limit.WithNext(func(c fiber.Ctx) bool {
		seen = append(seen, c.Route().Path)
		return true
	}))
	app := fiber.New()
	app.Use(limit)
	app.Group("/v1", limit).Get("/items/:id", limit, ok)
	if w := serve(app, "GET", "/v1/items/4"); w.Code != 200 {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if want := []string{"/", "/v1", "/v1/items/:id"}; !slices.Equal(seen, want) {
		t.Fatalf("c.Route().Path under app.Use, group, route = %q, want %q", seen, want)
	}
}

// The tenant travels in the request's context.Context: SetTenant in the
// authentication handler, gate.TenantFromContext(c.Context()) after.
func TestTenantInRequestContext(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	app := fiber.New()
	app.Get("/", as("ctx"), fiberv3limit.New(testkit.NewUnitGate(t, lim)), func(c fiber.Ctx) error {
		tn, _ := tggate.TenantFromContext(c.Context())
		return c.SendString(tn.ID)
	})
	if w := serve(app, "GET", "/"); w.Code != 200 || w.Body.String() != "ctx" || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("%d %v %q", w.Code, w.Header(), w.Body)
	}
	app = fiber.New()
	app.Get("/", fiberv3limit.New(testkit.NewUnitGate(t, lim)), ok)
	if w := serve(app, "GET", "/"); w.Code != 401 || w.Header().Get("Content-Type") != render.ProblemContentType {
		t.Fatalf("no tenant: %d %v", w.Code, w.Header())
	}
}

// A *fiber.Error returned by the handler or by a deny handler is rendered
// by the app's ErrorHandler under the rate-limit headers.
func TestHeadersSurviveFiberErrors(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	reached := 0
	app := fiber.New()
	app.Get("/", as("errors"), fiberv3limit.New(testkit.NewUnitGate(t, lim), fiberv3limit.WithDenyHandler(func(_ fiber.Ctx, v tggate.Verdict) error {
		return fiber.NewError(v.Status, v.Problem.Title)
	})), func(c fiber.Ctx) error {
		if reached++; reached == 1 {
			return fiber.ErrBadGateway
		}
		return c.SendStatus(http.StatusOK)
	})
	if w := serve(app, "GET", "/"); w.Code != http.StatusBadGateway || w.Header().Get("RateLimit") != `"default";r=1;t=100` {
		t.Fatalf("handler error: %d %v", w.Code, w.Header())
	}
	serve(app, "GET", "/")
	w := serve(app, "GET", "/")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "100" || w.Header().Get("X-RateLimit-Remaining") != "0" ||
		w.Body.String() != "Too Many Requests" || reached != 2 {
		t.Fatalf("denied: %d %v %q, handler reached %d", w.Code, w.Header(), w.Body, reached)
	}
}

func TestOptions(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	t.Run("next", func(t *testing.T) {
		app := fiber.New()
		limit := fiberv3limit.New(testkit.NewUnitGate(t, lim), fiberv3limit.WithNext(func(c fiber.Ctx) bool { return c.Query("skip") != "" }))
		app.Get("/", as("next"), limit, ok)
		for range 3 {
			if w := serve(app, "GET", "/?skip=1"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped: %d %v", w.Code, w.Header())
			}
		}
		if w := serve(app, "GET", "/"); w.Header().Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("not skipped: %d %v", w.Code, w.Header())
		}
	})
	t.Run("route func before the gate's cost func", func(t *testing.T) {
		app := fiber.New()
		app.Get("/x", as("cost"), fiberv3limit.New(testkit.NewUnitGate(t, lim, tggate.WithCostFunc(func(context.Context, quota.Tenant, tggate.Endpoint) (tggate.Route, bool) {
			return tggate.Route{Class: "export", Cost: 3}, true
		})), fiberv3limit.WithRouteFunc(func(c fiber.Ctx) (tggate.Route, bool) {
			return tggate.Route{Class: "export", Cost: 2}, c.Query("big") != ""
		})), ok)
		if got := serve(app, "GET", "/x?big=1").Header().Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s", got)
		}
		if got := serve(app, "GET", "/x").Header().Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s", got)
		}
	})
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
const misconfiguredBody = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`

// A route function's bad route is the misconfiguration answer: 500 with
// the fixed problem+json body, the cause only for the error hook.
func TestMisconfigured(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	bad := fiberv3limit.WithRouteFunc(func(fiber.Ctx) (tggate.Route, bool) { return tggate.Route{Class: "a b", Cost: 1}, true })
	var hooked error
	app := fiber.New()
	app.Get("/", as("t"), fiberv3limit.New(testkit.NewUnitGate(t, lim), nil, fiberv3limit.WithErrorHandler(func(_ fiber.Ctx, err error) { hooked = err }), bad), ok)
	w := serve(app, "GET", "/")
	if w.Code != 500 || w.Header().Get("Content-Type") != render.ProblemContentType || w.Body.String() != misconfiguredBody || !errors.Is(hooked, core.ErrInvalidConfig) {
		t.Fatalf("bad route: %d %v %q, hook got %v", w.Code, w.Header(), w.Body, hooked)
	}
}

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	fiberv3limit.New(g, nil)
	for option, o := range map[string]fiberv3limit.Option{
		"fiberv3limit.WithRouteFunc":    fiberv3limit.WithRouteFunc(nil),
		"fiberv3limit.WithNext":         fiberv3limit.WithNext(nil),
		"fiberv3limit.WithPatternFunc":  fiberv3limit.WithPatternFunc(nil),
		"fiberv3limit.WithDenyHandler":  fiberv3limit.WithDenyHandler(nil),
		"fiberv3limit.WithErrorHandler": fiberv3limit.WithErrorHandler(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: fiberv3limit.New: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			fiberv3limit.New(g, o)
		}()
	}
}
