package adapt_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

type frameworkCtx struct{ big bool }

type deny func(*frameworkCtx, gate.Verdict)

// option is an adapter's Option.
type option = adapt.Option[*frameworkCtx, deny]

// newConfig is adapt.New as an adapter calls it.
func newConfig(g *gate.Gate, d deny, opts ...option) *adapt.Config[*frameworkCtx, deny] {
	return adapt.New("fw.Middleware", g, d, opts)
}

// offlineGate is a gate over offlineLimiter.
func offlineGate(t *testing.T) *gate.Gate {
	t.Helper()
	g, err := gate.New(offlineLimiter(t))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// offlineLimiter is a limiter whose store refuses every connection:
// core.New makes no network call, and Gate.Route consults no store.
func offlineLimiter(t *testing.T, opts ...core.Option) *core.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{quota.
		DefaultClass: {Capacity: 1, RefillPerSecond: 1},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// The route function names the route before the gate is asked, and wins
// over the gate's cost function and route table; ok false leaves them to
// decide. The framework's context reaches it directly.
func TestDecideRouteFunc(t *testing.T) {
	g, err := gate.New(offlineLimiter(t), gate.WithRoutes(gate.Routes{"/t": {Exempt: true}, "/u": {Class: "table", Cost: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var seen *frameworkCtx
	c := newConfig(g, deny(nil), nil, adapt.RouteFunc[*frameworkCtx, deny]("fw.WithRouteFunc", func(f *frameworkCtx) (gate.Route, bool) {
		seen = f
		return gate.Route{Exempt: true}, f.big
	}))
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t", Tier: "free"})
	big := &frameworkCtx{big: true}
	if v := c.Decide(ctx, big, gate.Endpoint{Method: "GET", Pattern: "/u"}); !v.Proceed || !v.Route.Exempt || seen != big {
		t.Fatalf("route func's exempt route: verdict %+v, saw %p want %p", v, seen, big)
	}
	// ok false: the table's route, checked (the store is down: fail-open)
	if v := c.Decide(ctx, &frameworkCtx{}, gate.Endpoint{Method: "GET", Pattern: "/u"}); v.Route.Class != "table" {
		t.Fatalf("fallback to the table: route %+v", v.Route)
	}
	// unmatched: not asked
	seen = nil
	if v := c.Decide(ctx, big, gate.Endpoint{Method: "GET", Pattern: "", Unmatched: true}); !v.Unmatched || seen != nil {
		t.Fatalf("unmatched: verdict %+v, route func asked: %v", v, seen != nil)
	}
}

func TestSetHeaders(t *testing.T) {
	h := http.Header{"Ratelimit": {"old"}}
	adapt.SetHeaders(h, []render.Header{{Name: "RateLimit", Value: "new"}, {Name: "X-RateLimit-Limit", Value: "3"}, {Name: "x-custom", Value: "c"}})
	if h.Get("RateLimit") != "new" || len(h["Ratelimit"]) != 1 || h.Get("X-Ratelimit-Limit") != "3" || h.Get("X-Custom") != "c" {
		t.Fatalf("%v", h)
	}
	hs := []render.Header{{Name: "RateLimit", Value: "v"}, {Name: "Retry-After", Value: "1"}}
	h = http.Header{}
	if n := testing.AllocsPerRun(100, func() { adapt.SetHeaders(h, hs) }); n > 1 {
		t.Fatalf("SetHeaders allocates %v times for known headers, want 1", n)
	}
}

// Decide reports a store failure to the typed error hook, with the
// framework's context.
func TestDecideReportsErrors(t *testing.T) {
	g, err := gate.New(offlineLimiter(t, core.WithFailurePolicy(core.FailOpen)))
	if err != nil {
		t.Fatal(err)
	}
	var got *frameworkCtx
	var reported error
	hook := func(f *frameworkCtx, err error) { got, reported = f, err }
	c := newConfig(g, deny(nil), adapt.ErrorHandler[*frameworkCtx, deny]("fw.WithErrorHandler", hook))
	fc := &frameworkCtx{}
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"})
	v := c.Decide(ctx, fc, gate.Endpoint{Method: "GET", Pattern: "/"})
	if !v.Proceed || v.Err == nil || reported != v.Err || got != fc {
		t.Fatalf("verdict %+v, hook got %v with %p (want %p)", v, reported, got, fc)
	}
}

// A route function's zero Route is the misconfiguration answer: a 500
// that does not proceed, with the fixed body, and the cause only in
// Verdict.Err (and so the hook).
func TestDecideMisconfigured(t *testing.T) {
	g, err := gate.New(offlineLimiter(t))
	if err != nil {
		t.Fatal(err)
	}
	var reported error
	hook := adapt.ErrorHandler[*frameworkCtx, deny]("fw.WithErrorHandler", func(_ *frameworkCtx, err error) { reported = err })
	zero := adapt.RouteFunc[*frameworkCtx, deny]("fw.WithRouteFunc", func(*frameworkCtx) (gate.Route, bool) { return gate.Route{}, true })
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"})
	for name, c := range map[string]*adapt.Config[*frameworkCtx, deny]{
		"zero route": newConfig(g, deny(nil), hook, zero),
	} {
		reported = nil
		v := c.Decide(ctx, &frameworkCtx{}, gate.Endpoint{Method: "GET", Pattern: "/"})
		if v.Proceed || v.Status != http.StatusInternalServerError || v.ContentType != render.ProblemContentType ||
			!errors.Is(reported, core.ErrInvalidConfig) || string(v.Body) != string(adapt.Misconfigured.JSON()) {
			t.Errorf("%s: verdict %+v, hook got %v", name, v, reported)
		}
	}
}

// Skipped follows the skip function set last, and with none set nothing
// is skipped; the deny handler is the default until an option replaces it.
func TestOptions(t *testing.T) {
	g := offlineGate(t)
	skip, keep := &frameworkCtx{}, &frameworkCtx{}
	if newConfig(g, deny(nil)).Skipped(skip) {
		t.Fatal("skipped with no skip function")
	}
	var denied, replaced bool
	c := newConfig(g, deny(func(*frameworkCtx, gate.Verdict) { denied = true }),
		adapt.Skipper[*frameworkCtx, deny]("fw.WithSkipper", func(f *frameworkCtx) bool { return f == keep }),
		adapt.Skipper[*frameworkCtx, deny]("fw.WithSkipper", func(f *frameworkCtx) bool { return f == skip }),
		adapt.PatternFunc[*frameworkCtx, deny]("fw.WithPatternFunc", func(*frameworkCtx) string { return "/p" }),
		adapt.CostHeader[*frameworkCtx, deny]("fw.WithCostHeader", "tollgate-cost"),
	)
	if !c.Skipped(skip) || c.Skipped(keep) {
		t.Fatalf("Skipped: %v for the skipped request, %v for the other", c.Skipped(skip), c.Skipped(keep))
	}
	c.Deny(keep, gate.Verdict{})
	if !denied {
		t.Fatal("the default deny handler did not run")
	}
	if p := c.Pattern(keep, "/framework"); p != "/p" {
		t.Fatalf("Pattern = %q, want the pattern func's", p)
	}
	if c.CostHeader != "Tollgate-Cost" {
		t.Fatalf("CostHeader = %q, want it canonical", c.CostHeader)
	}
	c = newConfig(g, deny(nil), adapt.DenyHandler[*frameworkCtx, deny]("fw.WithDenyHandler", deny(func(*frameworkCtx, gate.Verdict) { replaced = true })))
	c.Deny(keep, gate.Verdict{})
	if !replaced {
		t.Fatal("WithDenyHandler did not replace the default")
	}
}

// A nil gate, and an option given a value it cannot use, panic where the
// adapter is registered, naming the constructor and the option, as
// http.Handle(pattern, nil) does; a nil option is skipped.
func TestNewPanicsOnMisconfiguration(t *testing.T) {
	g := offlineGate(t)
	for want, build := range map[string]func(){
		"tollgate: fw.Middleware: nil gate": func() { newConfig(nil, deny(nil)) },
		"tollgate: fw.Middleware: fw.WithSkipper: nil function": func() {
			newConfig(g, deny(nil), adapt.Skipper[*frameworkCtx, deny]("fw.WithSkipper", nil))
		},
		"tollgate: fw.Middleware: fw.WithRouteFunc: nil function": func() {
			newConfig(g, deny(nil), adapt.RouteFunc[*frameworkCtx, deny]("fw.WithRouteFunc", nil))
		},
		"tollgate: fw.Middleware: fw.WithPatternFunc: nil function": func() {
			newConfig(g, deny(nil), adapt.PatternFunc[*frameworkCtx, deny]("fw.WithPatternFunc", nil))
		},
		"tollgate: fw.Middleware: fw.WithErrorHandler: nil function": func() {
			newConfig(g, deny(nil), adapt.ErrorHandler[*frameworkCtx, deny]("fw.WithErrorHandler", nil))
		},
		"tollgate: fw.Middleware: fw.WithDenyHandler: nil function": func() {
			newConfig(g, deny(nil), adapt.DenyHandler[*frameworkCtx, deny]("fw.WithDenyHandler", deny(nil)))
		},
		`tollgate: fw.Middleware: fw.WithCostHeader: "" is not an HTTP header name`: func() {
			newConfig(g, deny(nil), adapt.CostHeader[*frameworkCtx, deny]("fw.WithCostHeader", ""))
		},
		`tollgate: fw.Middleware: fw.WithCostHeader: "Cost:" is not an HTTP header name`: func() {
			newConfig(g, deny(nil), adapt.CostHeader[*frameworkCtx, deny]("fw.WithCostHeader", "Cost:"))
		},
	} {
		func() {
			defer func() {
				if r := recover(); r != want {
					t.Errorf("recovered %v, want %q", r, want)
				}
			}()
			build()
			t.Errorf("returned, want the panic %q", want)
		}()
	}
	if c := newConfig(g, deny(nil), nil); c.Gate != g {
		t.Fatal("a nil option was not skipped")
	}
	if err := adapt.OptionError("fw.WithX", "why"); !errors.Is(err, core.ErrInvalidConfig) || err.Error() != "tollgate: fw.WithX: why" {
		t.Fatalf("OptionError: %v", err)
	}
}

// Serve calls the framework's glue in the order of the request sequence:
// a skipped request only goes on; a denied one gets its headers and the
// deny handler, never the handler; one that proceeds gets its headers,
// then the handler. PatternFunc's answer replaces the framework's pattern.
func TestServe(t *testing.T) {
	// the store is down: a request that is charged proceeds through g
	// (fail-open) and is denied through closed
	g, err := gate.New(offlineLimiter(t, core.WithFailurePolicy(core.FailOpen)), gate.WithCostReports())
	if err != nil {
		t.Fatal(err)
	}
	closed, err := gate.New(offlineLimiter(t, core.WithFailurePolicy(core.FailClosed)), gate.WithRoutes(gate.Routes{"/own": {Exempt: true}}))
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	endpoint := func(f *frameworkCtx) (context.Context, gate.Endpoint) {
		calls = append(calls, "endpoint")
		return gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"}), gate.Endpoint{Method: "GET", Pattern: "/paid"}
	}
	setHeaders := func(*frameworkCtx, []render.Header) { calls = append(calls, "headers") }
	setContext := func(*frameworkCtx, context.Context) { calls = append(calls, "context") }
	next := func(*frameworkCtx) error { calls = append(calls, "next"); return nil }
	denied := func(*frameworkCtx, gate.Verdict) { calls = append(calls, "deny") }
	skip := &frameworkCtx{}
	own := func(*frameworkCtx) string { return "/own" }
	for _, tc := range []struct {
		name string
		c    *adapt.Config[*frameworkCtx, deny]
		f    *frameworkCtx
		want string
	}{
		{"skipped", newConfig(g, denied, adapt.Skipper[*frameworkCtx, deny]("fw.WithSkipper", func(f *frameworkCtx) bool { return f == skip })), skip, "next"},
		{"denied", newConfig(closed, denied), &frameworkCtx{}, "endpoint headers deny"},
		// failed open: proceeds with nothing to settle, so no cost context
		// (the adapters' conformance scenarios settle-* cover that step)
		{"proceeds", newConfig(g, denied), &frameworkCtx{}, "endpoint headers next"},
		// "/own" is exempt: it proceeds, with no cost to report
		{"pattern func", newConfig(closed, denied, adapt.PatternFunc[*frameworkCtx, deny]("fw.WithPatternFunc", own)), &frameworkCtx{}, "endpoint headers next"},
	} {
		calls = nil
		if err := tc.c.Serve(tc.f, endpoint, setHeaders, setContext, next); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if got := strings.Join(calls, " "); got != tc.want {
			t.Errorf("%s: calls %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A deny handler that returns an error has it returned by Serve.
func TestServeDenyError(t *testing.T) {
	errDenied := errors.New("denied")
	g, err := gate.New(offlineLimiter(t, core.WithFailurePolicy(core.FailClosed)))
	if err != nil {
		t.Fatal(err)
	}
	c := adapt.New[*frameworkCtx]("fw.Middleware", g, func(*frameworkCtx, gate.Verdict) error { return errDenied }, nil)
	endpoint := func(*frameworkCtx) (context.Context, gate.Endpoint) {
		return gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"}), gate.Endpoint{Method: "GET", Pattern: "/"}
	}
	err = c.Serve(&frameworkCtx{}, endpoint, func(*frameworkCtx, []render.Header) {}, func(*frameworkCtx, context.Context) {},
		func(*frameworkCtx) error { t.Error("a denied request went on"); return nil })
	if err != errDenied {
		t.Fatalf("Serve returned %v, want the deny handler's error", err)
	}
}
