package adapt_test

import (
	"context"
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
