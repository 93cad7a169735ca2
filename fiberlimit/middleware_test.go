package fiberlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/core"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/fiberlimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func newLimiter(t testing.TB, opts ...core.Option) *core.Limiter {
	t.Helper()
	return testkit.NewLimiter(t, redistest.Client(t), quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free":      testkit.UnitTiers.Tiers["free"],
		"anonymous": {Classes: map[string]quota.Quota{"default": {Capacity: 100, RefillPerSecond: 1}}},
	}}, opts...)
}

func tenant(id string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		fiberlimit.SetTenant(c, quota.Tenant{ID: id})
		return c.Next()
	}
}

func ok(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) }

func do(t *testing.T, app *fiber.App, method, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res
}

func TestOptions(t *testing.T) {
	lim := newLimiter(t)
	t.Run("next skips", func(t *testing.T) {
		app := fiber.New()
		app.Get("/skip", tenant("next"), fiberlimit.New(testkit.NewUnitGate(t, lim), fiberlimit.WithNext(func(c *fiber.Ctx) bool { return true })), ok)
		for range 3 {
			if res := do(t, app, "GET", "/skip"); res.StatusCode != 200 || res.Header.Get("RateLimit") != "" {
				t.Fatalf("skipped: %d %v", res.StatusCode, res.Header)
			}
		}
	})
	t.Run("route func before the gate's cost func", func(t *testing.T) {
		app := fiber.New()
		app.Get("/x", tenant("cost"), fiberlimit.New(testkit.NewUnitGate(t, lim, tggate.WithCostFunc(func(context.Context, quota.Tenant, tggate.Endpoint) (tggate.Route, bool) {
			return tggate.Route{Class: "export", Cost: 3}, true
		})), fiberlimit.WithRouteFunc(func(c *fiber.Ctx) (tggate.Route, bool) {
			return tggate.Route{Class: "export", Cost: 2}, c.Query("big") != ""
		})), ok)
		if got := do(t, app, "GET", "/x?big=1").Header.Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("route func: remaining %s", got)
		}
		if got := do(t, app, "GET", "/x").Header.Get("X-RateLimit-Remaining"); got != "5" {
			t.Fatalf("gate cost func: remaining %s", got)
		}
	})
	t.Run("route template per route; mount prefix under Use", func(t *testing.T) {
		gate := testkit.NewUnitGate(t, lim, tggate.WithRoutes(tggate.Routes{"GET /items/:id": {Class: "export", Cost: 1}, "/api": {Class: "export", Cost: 2}}))
		app := fiber.New()
		app.Get("/items/:id", tenant("template"), fiberlimit.New(gate), ok)
		api := app.Group("/api", tenant("prefix"), fiberlimit.New(gate))
		api.Get("/anything/:x", ok)
		if got := do(t, app, "GET", "/items/5").Header.Get("X-RateLimit-Remaining"); got != "9" {
			t.Fatalf("per route: remaining %q", got)
		}
		if got := do(t, app, "GET", "/api/anything/1").Header.Get("X-RateLimit-Remaining"); got != "8" {
			t.Fatalf("group: remaining %q", got)
		}
	})
	t.Run("deny handler", func(t *testing.T) {
		app := fiber.New()
		app.Get("/", tenant("deny"), fiberlimit.New(testkit.NewUnitGate(t, lim), fiberlimit.WithDenyHandler(func(c *fiber.Ctx, v tggate.Verdict) error {
			return c.Status(http.StatusTeapot).SendString(fmt.Sprint(v.Status))
		})), ok)
		for range 2 {
			do(t, app, "GET", "/")
		}
		if res := do(t, app, "GET", "/"); res.StatusCode != http.StatusTeapot || res.Header.Get("Retry-After") == "" {
			t.Fatalf("deny: %d %v", res.StatusCode, res.Header)
		}
	})
}

// Strings from the request reach core as copies: Fiber reuses its request
// buffers for the next request, and a proxy header's IP points into them.
func TestNoBufferAliasing(t *testing.T) {
	lim := newLimiter(t)
	var mu sync.Mutex
	var seen []tggate.Endpoint
	app := fiber.New(fiber.Config{ProxyHeader: "X-Real-Ip"})
	app.Get("/", fiberlimit.New(testkit.NewUnitGate(t, lim, tggate.WithAnonymous(""), tggate.WithCostFunc(func(_ context.Context, _ quota.Tenant, e tggate.Endpoint) (tggate.Route, bool) {
		mu.Lock()
		seen = append(seen, e)
		mu.Unlock()
		return tggate.Route{}, false
	}))), ok)
	for i := range 20 {
		if res := do(t, app, "GET", "/", "X-Real-Ip", fmt.Sprintf("10.0.0.%d", i)); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	for i, e := range seen {
		if want := fmt.Sprintf("10.0.0.%d", i); e.ClientIP != want || e.Method != "GET" {
			t.Fatalf("endpoint %d kept %q %q, want GET %q: a string aliases fasthttp's buffer", i, e.Method, e.ClientIP, want)
		}
	}
}

// A bad route from the gate's cost function or the route function is the
// fixed 500 misconfiguration answer, never a free pass.
func TestCostFuncValidated(t *testing.T) {
	lim := newLimiter(t)
	zero := func(context.Context, quota.Tenant, tggate.Endpoint) (tggate.Route, bool) {
		return tggate.Route{Class: "default", Cost: 0}, true
	}
	tooBig := fiberlimit.WithRouteFunc(func(*fiber.Ctx) (tggate.Route, bool) {
		return tggate.Route{Class: "default", Cost: quota.MaxCost + 1}, true
	})
	for name, c := range map[string]struct {
		gate *tggate.Gate
		opt  fiberlimit.Option
	}{
		"gate cost func": {testkit.NewUnitGate(t, lim, tggate.WithCostFunc(zero)), nil},
		"route func":     {testkit.NewUnitGate(t, lim), tooBig},
	} {
		var hooked error
		reached := 0
		app := fiber.New()
		app.Get("/x", tenant("zero-"+name), fiberlimit.New(c.gate, c.opt, fiberlimit.WithErrorHandler(func(_ *fiber.Ctx, err error) { hooked = err })),
			func(c *fiber.Ctx) error { reached++; return c.SendStatus(http.StatusOK) })
		res, body := doRead(t, app, "GET", "/x")
		if res.StatusCode != 500 || reached != 0 || !errors.Is(hooked, core.ErrInvalidConfig) || body != misconfiguredBody {
			t.Fatalf("%s: %d %q, handler reached %d times, hook %v", name, res.StatusCode, body, reached, hooked)
		}
	}
}

// misconfiguredBody is the fixed body of every misconfiguration answer.
const misconfiguredBody = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`

// doRead is do, with the response's body.
func doRead(t *testing.T, app *fiber.App, method, path string) (*http.Response, string) {
	t.Helper()
	res, err := app.Test(httptest.NewRequest(method, path, nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// An option given nothing it can use fails where the middleware is
// registered, naming the option, as a nil gate does (see the package's own
// tests); a nil Option is skipped.
func TestMisconfiguredPanics(t *testing.T) {
	g := testkit.NewUnitGate(t, testkit.NewUnitLimiter(t))
	fiberlimit.New(g, nil)
	for option, o := range map[string]fiberlimit.Option{
		"fiberlimit.WithRouteFunc":    fiberlimit.WithRouteFunc(nil),
		"fiberlimit.WithNext":         fiberlimit.WithNext(nil),
		"fiberlimit.WithPatternFunc":  fiberlimit.WithPatternFunc(nil),
		"fiberlimit.WithDenyHandler":  fiberlimit.WithDenyHandler(nil),
		"fiberlimit.WithErrorHandler": fiberlimit.WithErrorHandler(nil),
	} {
		func() {
			defer func() {
				if r := recover(); r != "tollgate: fiberlimit.New: "+option+": nil function" {
					t.Errorf("%s(nil): recovered %v, want a panic naming it", option, r)
				}
			}()
			fiberlimit.New(g, o)
		}()
	}
}
