package gate_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

// offlineGate is a gate over a limiter whose store is never reached:
// Gate.Route consults no store, and a misconfigured route fails before
// the check.
func offlineGate(t *testing.T, opts ...gate.Option) *gate.Gate {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// An Endpoint.Route the adapter resolved wins over the cost function and
// the route table; the zero Route leaves them to decide.
func TestGateEndpointRoute(t *testing.T) {
	g := offlineGate(t, gate.
		WithRoutes(gate.Routes{"/t": {Class: "table", Cost: 1}}), gate.
		WithCostFunc(func(_ context.Context, _ quota.Tenant, e gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "costfunc", Cost: 2}, e.Method == http.MethodPost
		}))
	for _, c := range []struct {
		e    gate.Endpoint
		want string
	}{
		{gate.Endpoint{Method: http.MethodPost, Pattern: "/t", Route: gate.Route{Class: "resolved", Cost: 3}}, "resolved"},
		{gate.Endpoint{Method: http.MethodGet, Pattern: "/t", Route: gate.Route{Class: "resolved", Cost: 3}}, "resolved"},
		{gate.Endpoint{Method: http.MethodPost, Pattern: "/t"}, "costfunc"},
		{gate.Endpoint{Method: http.MethodGet, Pattern: "/t"}, "table"},
	} {
		if r := g.Route(context.Background(), quota.Tenant{ID: "t"}, c.e); r.Class != c.want {
			t.Errorf("%+v: class %q, want %q", c.e, r.Class, c.want)
		}
	}
}

// A resolved route is held to the route table's rules: a bad one is a
// misconfiguration (500, the error for the hook), never a free pass.
func TestGateEndpointRouteInvalid(t *testing.T) {
	g := offlineGate(t)
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t", Tier: "free"})
	v := g.Decide(ctx, gate.Endpoint{Method: http.MethodGet, Pattern: "/t", Route: gate.Route{Class: "default", Cost: -1}})
	if v.Proceed || v.Status != http.StatusInternalServerError || !errors.Is(v.Err, core.ErrInvalidConfig) {
		t.Fatalf("verdict %+v, want a 500 misconfiguration", v)
	}
}

// The gate keeps its own copy of the route table: New validated it once,
// and Decide takes its routes as they are, so a change to the caller's map
// afterwards (a route made free or invalid) does not reach it.
func TestGateRoutesCopied(t *testing.T) {
	rs := gate.Routes{"/t": {Class: "table", Cost: 1}}
	g := offlineGate(t, gate.WithRoutes(rs))
	rs["/t"] = gate.Route{Class: "table", Cost: 0}
	rs["/u"] = gate.Route{Exempt: true}
	ctx := context.Background()
	if r := g.Route(ctx, quota.Tenant{ID: "t"}, gate.Endpoint{Method: http.MethodGet, Pattern: "/t"}); r != (gate.Route{Class: "table", Cost: 1}) {
		t.Errorf("route of /t after the caller changed its map: %+v, want the table's as given to New", r)
	}
	if r := g.Route(ctx, quota.Tenant{ID: "t"}, gate.Endpoint{Method: http.MethodGet, Pattern: "/u"}); r.Exempt {
		t.Errorf("route of /u added to the caller's map after New: %+v, want the default route", r)
	}
}

// Only a request that reaches no handler of the service (the framework's
// own 404 or 405) proceeds unchecked; one a fallback handler of the
// service answers (a catch-all) is checked like any route, as the default
// route: the table, whose keys name routes, is not consulted for it.
func TestGateFallback(t *testing.T) {
	for _, c := range []struct {
		e    gate.Endpoint
		want bool
	}{
		{gate.Endpoint{}, true},
		{gate.Endpoint{Unmatched: true}, false},
		{gate.Endpoint{Unmatched: true, Fallback: true}, true},
		{gate.Endpoint{Fallback: true}, true},
	} {
		if got := c.e.Routed(); got != c.want {
			t.Errorf("%+v.Routed() = %v, want %v", c.e, got, c.want)
		}
	}
	g := offlineGate(t, gate.WithRoutes(gate.Routes{"/*": {Exempt: true}, "GET /*": {Class: "table", Cost: 2}}))
	// no identity: the framework's 404 passes, a catch-all needs a tenant
	// (and is not exempt by the table's "/*")
	v := g.Decide(context.Background(), gate.Endpoint{Method: http.MethodGet, Pattern: "/*", Unmatched: true})
	if !v.Proceed || !v.Unmatched || v.Checked || v.Unauthenticated {
		t.Errorf("the framework's 404: %+v, want to proceed unchecked", v)
	}
	v = g.Decide(context.Background(), gate.Endpoint{Method: http.MethodGet, Pattern: "/*", Unmatched: true, Fallback: true})
	if v.Proceed || v.Unmatched || !v.Unauthenticated || v.Status != http.StatusUnauthorized {
		t.Errorf("a catch-all without identity: %+v, want 401", v)
	}
	if r := g.Route(context.Background(), quota.Tenant{ID: "t"}, gate.Endpoint{Method: http.MethodGet, Pattern: "/*", Unmatched: true, Fallback: true}); r != (gate.Route{Class: "default", Cost: 1}) {
		t.Errorf("a catch-all's route = %+v, want the default route", r)
	}
	if r := g.Route(context.Background(), quota.Tenant{ID: "t"}, gate.Endpoint{Method: http.MethodGet, Pattern: "/*"}); r.Class != "table" {
		t.Errorf("the matched route /*: %+v, want the table's", r)
	}
	// a cost function still prices a catch-all
	g = offlineGate(t, gate.WithCostFunc(func(_ context.Context, _ quota.Tenant, e gate.Endpoint) (gate.Route, bool) {
		return gate.Route{Class: "spa", Cost: 3}, e.Fallback
	}))
	if r := g.Route(context.Background(), quota.Tenant{ID: "t"}, gate.Endpoint{Unmatched: true, Fallback: true}); r.Class != "spa" {
		t.Errorf("a catch-all priced by the cost function: %+v", r)
	}
}

// A nil cost function is an error naming the option, not a silent default.
func TestGateCostFuncNil(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.New(lim, gate.WithCostFunc(nil)); !errors.Is(err, core.ErrInvalidConfig) || err.Error() != "tollgate: gate.WithCostFunc: nil function" {
		t.Fatalf("WithCostFunc(nil): %v", err)
	}
}
