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
