package adapt_test

import (
	"context"
	"errors"
	"net/http"
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

// option is an adapter's Option: the underlying type of adapt.Option.
type option func(*adapt.Config[*frameworkCtx, deny])

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
	c := adapt.New(g, deny(nil), []option{nil, adapt.RouteFunc[option](func(f *frameworkCtx) (gate.Route, bool) {
		seen = f
		return gate.Route{Exempt: true}, f.big
	})})
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
// framework's context; nil hooks are ignored by the setters.
func TestDecideReportsErrors(t *testing.T) {
	g, err := gate.New(offlineLimiter(t, core.WithFailurePolicy(core.FailOpen)))
	if err != nil {
		t.Fatal(err)
	}
	var got *frameworkCtx
	var reported error
	hook := func(f *frameworkCtx, err error) { got, reported = f, err }
	c := adapt.New(g, deny(nil), []option{adapt.ErrorHandler[option](hook), adapt.ErrorHandler[option](nil)})
	fc := &frameworkCtx{}
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"})
	v := c.Decide(ctx, fc, gate.Endpoint{Method: "GET", Pattern: "/"})
	if !v.Proceed || v.Err == nil || reported != v.Err || got != fc {
		t.Fatalf("verdict %+v, hook got %v with %p (want %p)", v, reported, got, fc)
	}
}

// A nil gate, and a route function's zero Route, are the one
// misconfiguration answer: a 500 that does not proceed, with the fixed
// body, and the cause only in Verdict.Err (and so the hook).
func TestDecideMisconfigured(t *testing.T) {
	g, err := gate.New(offlineLimiter(t))
	if err != nil {
		t.Fatal(err)
	}
	var reported error
	hook := adapt.ErrorHandler[option](func(_ *frameworkCtx, err error) { reported = err })
	zero := adapt.RouteFunc[option](func(*frameworkCtx) (gate.Route, bool) { return gate.Route{}, true })
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t"})
	for name, c := range map[string]*adapt.Config[*frameworkCtx, deny]{
		"nil gate":   adapt.New(nil, deny(nil), []option{hook}),
		"zero route": adapt.New(g, deny(nil), []option{hook, zero}),
	} {
		reported = nil
		v := c.Decide(ctx, &frameworkCtx{}, gate.Endpoint{Method: "GET", Pattern: "/"})
		if v.Proceed || v.Status != http.StatusInternalServerError || v.ContentType != render.ProblemContentType ||
			!errors.Is(reported, core.ErrInvalidConfig) || string(v.Body) != string(adapt.Misconfigured.JSON()) {
			t.Errorf("%s: verdict %+v, hook got %v", name, v, reported)
		}
	}
}

// Skipped follows the skip function set last; Skipper ignores nil, and
// with none set nothing is skipped. DenyHandler ignores a nil function.
func TestOptions(t *testing.T) {
	skip, keep := &frameworkCtx{}, &frameworkCtx{}
	if adapt.New[option](nil, deny(nil), nil).Skipped(skip) {
		t.Fatal("skipped with no skip function")
	}
	var denied bool
	c := adapt.New(nil, deny(func(*frameworkCtx, gate.Verdict) { denied = true }), []option{
		adapt.Skipper[option](func(f *frameworkCtx) bool { return f == skip }),
		adapt.Skipper[option](nil),
		adapt.DenyHandler[option](deny(nil)),
		adapt.PatternFunc[option](func(*frameworkCtx) string { return "/p" }),
	})
	if !c.Skipped(skip) || c.Skipped(keep) {
		t.Fatalf("Skipped: %v for the skipped request, %v for the other", c.Skipped(skip), c.Skipped(keep))
	}
	if c.Deny == nil {
		t.Fatal("a nil deny handler replaced the default")
	}
	c.Deny(keep, gate.Verdict{})
	if !denied {
		t.Fatal("the default deny handler did not run")
	}
	if p := c.Pattern(keep, "/framework"); p != "/p" {
		t.Fatalf("Pattern = %q, want the pattern func's", p)
	}
}
