package adapt_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

type frameworkCtx struct{ big bool }

// The cost functions are asked in order: framework-typed, neutral, then
// the route table. core.New makes no network call, and Gate.Route consults
// no store.
func TestNewGateCostOrder(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	res, err := core.NewResolver(core.Tiers{Tiers: map[string]core.Tier{"x": {Classes: map[string]core.Quota{"default": core.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res)
	if err != nil {
		t.Fatal(err)
	}
	var c adapt.Config[*frameworkCtx]
	c.AddGate(nil, core.WithRoutes(core.Routes{"/t": {Class: "table", Cost: 1}}))
	c.CostFunc = func(_ context.Context, _ core.Tenant, e core.Endpoint) (core.Route, bool) {
		return core.Route{Class: "neutral", Cost: 2}, e.Method == "POST"
	}
	c.FrameworkCostFunc = func(f *frameworkCtx) (core.Route, bool) { return core.Route{Class: "typed", Cost: 3}, f.big }
	g, err := c.NewGate(lim)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f      *frameworkCtx
		method string
		want   string
	}{
		{&frameworkCtx{big: true}, "POST", "typed"},
		{&frameworkCtx{}, "POST", "neutral"},
		{&frameworkCtx{}, "GET", "table"},
	} {
		ctx := c.Context(context.Background(), tc.f)
		if r := g.Route(ctx, core.Tenant{ID: "t"}, core.Endpoint{Method: tc.method, Pattern: "/t"}); r.Class != tc.want {
			t.Errorf("%+v %s: class %q, want %q", *tc.f, tc.method, r.Class, tc.want)
		}
	}
	var plain adapt.Config[*frameworkCtx]
	if ctx := plain.Context(context.Background(), &frameworkCtx{}); ctx != context.Background() {
		t.Error("Context wraps the context with no framework cost function to serve")
	}
}

func TestSetHeaders(t *testing.T) {
	h := http.Header{"Ratelimit": {"old"}}
	adapt.SetHeaders(h, []core.Header{{Name: "RateLimit", Value: "new"}, {Name: "X-RateLimit-Limit", Value: "3"}, {Name: "x-custom", Value: "c"}})
	if h.Get("RateLimit") != "new" || len(h["Ratelimit"]) != 1 || h.Get("X-Ratelimit-Limit") != "3" || h.Get("X-Custom") != "c" {
		t.Fatalf("%v", h)
	}
	hs := []core.Header{{Name: "RateLimit", Value: "v"}, {Name: "Retry-After", Value: "1"}}
	h = http.Header{}
	if n := testing.AllocsPerRun(100, func() { adapt.SetHeaders(h, hs) }); n > 1 {
		t.Fatalf("SetHeaders allocates %v times for known headers, want 1", n)
	}
}

type option interface{ apply(*[]string) }

type appendOption string

func (o appendOption) apply(c *[]string) { *c = append(*c, string(o)) }

// Apply skips nil options and keeps the order of the others.
func TestApply(t *testing.T) {
	got := *adapt.Apply(&[]string{}, []option{appendOption("a"), nil, appendOption("b")}, option.apply)
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("applied %q, want [a b]", got)
	}
}

// Checker.Decide reports a store failure to the typed error hook, with the
// framework's context; nil hooks are ignored by the setters.
func TestDecideReportsErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer client.Close()
	res, err := core.NewResolver(core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		core.DefaultClass: {Capacity: 1, RefillPerSecond: 1},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res, core.WithFailurePolicy(core.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	var c adapt.Config[*frameworkCtx]
	var got *frameworkCtx
	var reported error
	c.SetOnError(func(f *frameworkCtx, err error) { got, reported = f, err })
	c.SetOnError(nil)
	fc := &frameworkCtx{}
	ctx := core.ContextWithTenant(context.Background(), core.Tenant{ID: "t"})
	v := c.Checker(lim).Decide(ctx, fc, core.Endpoint{Method: "GET", Pattern: "/"})
	if !v.Proceed || v.Err == nil || reported != v.Err || got != fc {
		t.Fatalf("verdict %+v, hook got %v with %p (want %p)", v, reported, got, fc)
	}
	// a bad configuration: every request is a 500 that does not proceed,
	// and the configuration error reaches the hook
	v = c.Checker(nil).Decide(ctx, fc, core.Endpoint{Method: "GET", Pattern: "/"})
	if v.Proceed || v.Status != http.StatusInternalServerError || v.ContentType != core.ProblemContentType ||
		!errors.Is(reported, core.ErrInvalidConfig) || string(v.Body) != string(adapt.Misconfigured.JSON()) {
		t.Fatalf("misconfigured: verdict %+v, hook got %v", v, reported)
	}
}

// Skipped follows the skip function set last; SetSkip ignores nil, and
// with none set nothing is skipped.
func TestSkip(t *testing.T) {
	var c adapt.Config[*frameworkCtx]
	skip, keep := &frameworkCtx{}, &frameworkCtx{}
	if c.Skipped(skip) {
		t.Fatal("skipped with no skip function")
	}
	c.SetSkip(func(f *frameworkCtx) bool { return f == skip })
	c.SetSkip(nil)
	if !c.Skipped(skip) || c.Skipped(keep) {
		t.Fatalf("Skipped: %v for the skipped request, %v for the other", c.Skipped(skip), c.Skipped(keep))
	}
}
