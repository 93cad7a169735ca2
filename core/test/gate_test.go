package core_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

func headerMap(hs []core.Header) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return m
}

func TestGate(t *testing.T) {
	c := redistest.Client(t)
	tiers := core.Tiers{Default: "free", Tiers: map[string]core.Tier{
		"free":      {Classes: map[string]core.Quota{"default": {Capacity: 2, RefillPerSecond: 0.5}, "export": {Capacity: 10, RefillPerSecond: 0.1}}},
		"anonymous": {Classes: map[string]core.Quota{"default": {Capacity: 1, RefillPerSecond: 0.01}}},
	}}
	res, err := core.NewResolver(tiers)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, c, res)
	g, err := core.NewGate(l, core.WithRoutes(core.Routes{
		"POST /v1/reports/export": {Class: "export", Cost: 5},
		"/healthz":                {Exempt: true},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := core.ContextWithTenant(context.Background(), core.Tenant{ID: "t42", Tier: "free"})

	t.Run("no tenant is 401", func(t *testing.T) {
		v := g.Decide(context.Background(), core.Endpoint{Method: "GET", Pattern: "/v1/profile", ClientIP: "10.0.0.1"})
		if v.Proceed || v.Status != 401 || !v.Unauthenticated || v.ContentType != core.ProblemContentType || v.Checked {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("exempt route is not checked", func(t *testing.T) {
		v := g.Decide(ctx, core.Endpoint{Method: "GET", Pattern: "/healthz"})
		if !v.Proceed || v.Checked || len(v.Headers) != 0 {
			t.Fatalf("%+v", v)
		}
		// and needs no identity
		v = g.Decide(context.Background(), core.Endpoint{Method: "GET", Pattern: "/healthz"})
		if !v.Proceed || v.Unauthenticated {
			t.Fatalf("exempt route without a tenant: %+v", v)
		}
	})
	t.Run("route table sets class and cost", func(t *testing.T) {
		v := g.Decide(ctx, core.Endpoint{Method: "POST", Pattern: "/v1/reports/export"})
		if !v.Proceed || v.Route.Class != "export" || v.Decision.Remaining != 5 {
			t.Fatalf("%+v", v)
		}
		h := headerMap(v.Headers)
		if h["RateLimit-Policy"] != `"export";q=10;w=100` || h["X-RateLimit-Remaining"] != "5" || h["RateLimit"] != `"export";r=5;t=10` {
			t.Fatalf("headers %v", h)
		}
		v = g.Decide(ctx, core.Endpoint{Method: "GET", Pattern: "/v1/reports/export"}) // other method: default
		if v.Route.Class != "default" || v.Route.Cost != 1 {
			t.Fatalf("GET export route = %+v", v.Route)
		}
	})
	t.Run("denial renders 429", func(t *testing.T) {
		ep := core.Endpoint{Method: "POST", Pattern: "/v1/reports/export"}
		g.Decide(ctx, ep)
		v := g.Decide(ctx, ep) // 0 left, cost 5: 50 s at 0.1/s
		if v.Proceed || v.Status != 429 {
			t.Fatalf("%+v", v)
		}
		h := headerMap(v.Headers)
		if h["Retry-After"] != "50" || h["RateLimit"] != `"export";r=0;t=50` {
			t.Fatalf("headers %v", h)
		}
		var p map[string]any
		if err := json.Unmarshal(v.Body, &p); err != nil || p["status"] != 429.0 || !strings.Contains(p["detail"].(string), "retry in 50 s") {
			t.Fatalf("body %s: %v", v.Body, err)
		}
		if strings.Contains(string(v.Body), "t42") {
			t.Fatal("the body names the tenant")
		}
	})
	t.Run("anonymous callers keyed by IP", func(t *testing.T) {
		ga, err := core.NewGate(l, core.WithAnonymous(""))
		if err != nil {
			t.Fatal(err)
		}
		ep := core.Endpoint{Method: "GET", Pattern: "/x", ClientIP: "192.0.2.7"}
		if v := ga.Decide(context.Background(), ep); !v.Proceed || v.Tenant.ID != "anonymous:192.0.2.7" {
			t.Fatalf("%+v", v)
		}
		if v := ga.Decide(context.Background(), ep); v.Proceed || v.Status != 429 {
			t.Fatalf("second anonymous call: %+v", v)
		}
		ep.ClientIP = "192.0.2.8"
		if v := ga.Decide(context.Background(), ep); !v.Proceed {
			t.Fatalf("other IP: %+v", v)
		}
	})
	t.Run("bad routes are refused", func(t *testing.T) {
		if _, err := core.NewGate(l, core.WithRoutes(core.Routes{"/x": {Class: "a b", Cost: 1}})); err == nil {
			t.Fatal("bad class accepted")
		}
		if _, err := core.NewGate(l, core.WithRoutes(core.Routes{"/x": {Class: "a", Cost: 0}})); err == nil {
			t.Fatal("cost 0 accepted")
		}
	})
}
