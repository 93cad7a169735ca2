package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func headerMap(hs []render.Header) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return m
}

func TestGate(t *testing.T) {
	c := redistest.Client(t)
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free":      {Classes: map[string]quota.Quota{"default": {Capacity: 2, RefillPerSecond: 0.5}, "export": {Capacity: 10, RefillPerSecond: 0.1}}},
		"anonymous": {Classes: map[string]quota.Quota{"default": {Capacity: 1, RefillPerSecond: 0.01}}},
	}}
	res, err := quota.NewResolver(tiers)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, c, res)
	g, err := gate.New(l, gate.WithRoutes(gate.Routes{
		"POST /v1/reports/export": {Class: "export", Cost: 5},
		"/healthz":                {Exempt: true},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t42", Tier: "free"})

	t.Run("no tenant is 401", func(t *testing.T) {
		v := g.Decide(context.Background(), gate.Endpoint{Method: "GET", Pattern: "/v1/profile", ClientIP: "10.0.0.1"})
		if v.Proceed || v.Status != 401 || !v.Unauthenticated || v.ContentType != render.ProblemContentType || v.Checked {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("exempt route is not checked", func(t *testing.T) {
		v := g.Decide(ctx, gate.Endpoint{Method: "GET", Pattern: "/healthz"})
		if !v.Proceed || v.Checked || len(v.Headers) != 0 {
			t.Fatalf("%+v", v)
		}
		// and needs no identity
		v = g.Decide(context.Background(), gate.Endpoint{Method: "GET", Pattern: "/healthz"})
		if !v.Proceed || v.Unauthenticated {
			t.Fatalf("exempt route without a tenant: %+v", v)
		}
	})
	t.Run("route table sets class and cost", func(t *testing.T) {
		v := g.Decide(ctx, gate.Endpoint{Method: "POST", Pattern: "/v1/reports/export"})
		if !v.Proceed || v.Route.Class != "export" || v.Decision.Remaining != 5 {
			t.Fatalf("%+v", v)
		}
		h := headerMap(v.Headers)
		if h["RateLimit-Policy"] != `"export";q=10;w=100` || h["X-RateLimit-Remaining"] != "5" || h["RateLimit"] != `"export";r=5;t=10` {
			t.Fatalf("headers %v", h)
		}
		v = g.Decide(ctx, gate.Endpoint{Method: "GET", Pattern: "/v1/reports/export"}) // other method: default
		if v.Route.Class != "default" || v.Route.Cost != 1 {
			t.Fatalf("GET export route = %+v", v.Route)
		}
	})
	t.Run("HEAD is charged as its GET route", func(t *testing.T) {
		gh, err := gate.New(l, gate.WithRoutes(gate.Routes{"GET /v1/report": {Class: "export", Cost: 5}, "GET /healthz": {Exempt: true}}))
		if err != nil {
			t.Fatal(err)
		}
		hctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t-head", Tier: "free"})
		v := gh.Decide(hctx, gate.Endpoint{Method: "HEAD", Pattern: "/v1/report"})
		if !v.Proceed || v.Route.Class != "export" || v.Route.Cost != 5 || v.Decision.Remaining != 5 {
			t.Fatalf("HEAD = %+v", v)
		}
		if v := gh.Decide(hctx, gate.Endpoint{Method: "GET", Pattern: "/v1/report"}); !v.Proceed || v.Decision.Remaining != 0 {
			t.Fatalf("GET after HEAD = %+v", v)
		}
		if v := gh.Decide(hctx, gate.Endpoint{Method: "HEAD", Pattern: "/v1/report"}); v.Proceed || v.Status != 429 {
			t.Fatalf("HEAD on an empty bucket = %+v", v)
		}
		if v := gh.Decide(context.Background(), gate.Endpoint{Method: "HEAD", Pattern: "/healthz"}); !v.Proceed || v.Checked || v.Unauthenticated {
			t.Fatalf("HEAD of an exempt GET route = %+v", v)
		}
	})
	t.Run("unmatched requests are charged nothing", func(t *testing.T) {
		uctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t-unmatched", Tier: "free"})
		for _, c := range []context.Context{uctx, uctx, uctx, context.Background()} {
			v := g.Decide(c, gate.Endpoint{Method: "GET", Pattern: "", Unmatched: true})
			if !v.Proceed || !v.Unmatched || v.Checked || v.Unauthenticated || len(v.Headers) != 0 || v.Err != nil {
				t.Fatalf("unmatched = %+v", v)
			}
		}
		// the bucket is untouched: the next real request sees it full
		if v := g.Decide(uctx, gate.Endpoint{Method: "GET", Pattern: "/v1/untouched"}); v.Decision.Remaining != 1 {
			t.Fatalf("after unmatched requests: %+v", v)
		}
	})
	t.Run("denial renders 429", func(t *testing.T) {
		ep := gate.Endpoint{Method: "POST", Pattern: "/v1/reports/export"}
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
		ga, err := gate.New(l, gate.WithAnonymous(""))
		if err != nil {
			t.Fatal(err)
		}
		ep := gate.Endpoint{Method: "GET", Pattern: "/x", ClientIP: "192.0.2.7"}
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
		if _, err := gate.New(l, gate.WithRoutes(gate.Routes{"/x": {Class: "a b", Cost: 1}})); err == nil {
			t.Fatal("bad class accepted")
		}
		if _, err := gate.New(l, gate.WithRoutes(gate.Routes{"/x": {Class: "a", Cost: 0}})); err == nil {
			t.Fatal("cost 0 accepted")
		}
	})
}

// A CostFunc is held to the route table's rules: a class name that is not
// a valid name, a cost of 0 (a free peek) or above MaxCost is a
// misconfiguration, answered 500 and reported, never a free pass.
func TestGateCostFuncValidated(t *testing.T) {
	c := redistest.Client(t)
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": {Capacity: 1, RefillPerSecond: 0.01}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, c, res)
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "t1"})
	for _, bad := range []gate.Route{{Class: "default", Cost: 0}, {Class: "default", Cost: -1},
		{Class: "default", Cost: quota.MaxCost + 1}, {Class: "a b", Cost: 1}, {Class: "", Cost: 1}} {
		g, err := gate.New(l, gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
			return bad, true
		}))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			v := g.Decide(ctx, gate.Endpoint{Method: "GET", Pattern: "/x"})
			if v.Proceed || v.Status != 500 || !errors.Is(v.Err, core.ErrInvalidConfig) || v.ContentType != render.ProblemContentType {
				t.Fatalf("cost func %+v: proceed %v status %d err %v", bad, v.Proceed, v.Status, v.Err)
			}
			if strings.Contains(string(v.Body), "t1") {
				t.Fatalf("body names the tenant: %s", v.Body)
			}
		}
	}
	// nothing was charged: the one token is still there
	if d := check(t, l, "t1", 1); !d.Allowed {
		t.Fatalf("bucket charged by a rejected cost func: %+v", d)
	}
	// an exempt answer stays exempt
	g, _ := gate.New(l, gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
		return gate.Route{Exempt: true}, true
	}))
	if v := g.Decide(ctx, gate.Endpoint{Pattern: "/x"}); !v.Proceed || v.Checked {
		t.Fatalf("exempt: %+v", v)
	}
}

// The 401 names the scheme the caller must authenticate with (RFC 9110
// §11.6.1 requires WWW-Authenticate on a 401).
func TestGateUnauthenticatedChallenge(t *testing.T) {
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(1)}))
	g, err := gate.New(l)
	if err != nil {
		t.Fatal(err)
	}
	v := g.Decide(context.Background(), gate.Endpoint{Method: "GET", Pattern: "/x"})
	if v.Status != 401 || headerMap(v.Headers)["WWW-Authenticate"] != "Bearer" {
		t.Fatalf("401 headers %v", v.Headers)
	}
}

// Anonymous callers: an IPv4 address is its own tenant; an IPv6 caller is
// grouped by its /64 (one subscriber's allocation), so rotating through
// its own addresses earns no extra quota.
func TestGateAnonymousIPv6Grouped(t *testing.T) {
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 0.01}}))
	g, err := gate.New(l, gate.WithAnonymous(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ip, tenant string }{
		{"192.0.2.7", "anonymous:192.0.2.7"},
		{"::ffff:192.0.2.9", "anonymous:192.0.2.9"},
		{"2001:db8:1:2::1", "anonymous:2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ee:dd:cc", "anonymous:2001:db8:1:2::/64"},
		{"2001:DB8:1:3::1", "anonymous:2001:db8:1:3::/64"},
		{"fe80::1%eth0", "anonymous:fe80::/64"},
		{"not an ip", "anonymous:not an ip"},
	} {
		v := g.Decide(context.Background(), gate.Endpoint{Pattern: "/x", ClientIP: c.ip})
		if v.Tenant.ID != c.tenant {
			t.Errorf("%s: tenant %q, want %q", c.ip, v.Tenant.ID, c.tenant)
		}
	}
	v := g.Decide(context.Background(), gate.Endpoint{Pattern: "/x", ClientIP: "2001:db8:1:2::42"})
	if v.Proceed || v.Status != 429 {
		t.Fatalf("a second address of the same /64 got a fresh quota: %+v", v)
	}
}

// Anonymous callers never reach the override source: every new address
// would otherwise be a database query.
func TestGateAnonymousSkipsOverrides(t *testing.T) {
	var calls atomic.Int64
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free":      {Classes: map[string]quota.Quota{"default": quota.PerSecond(5)}},
		"anonymous": {Classes: map[string]quota.Quota{"default": quota.PerSecond(5)}},
	}}, quota.WithOverrides(quota.OverridesFunc(func(context.Context, string) (map[string]quota.Quota, error) {
		calls.Add(1)
		return nil, nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, redistest.Client(t), res)
	g, err := gate.New(l, gate.WithAnonymous(""))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		v := g.Decide(context.Background(), gate.Endpoint{Pattern: "/x", ClientIP: fmt.Sprintf("192.0.2.%d", i)})
		if !v.Proceed {
			t.Fatalf("%+v", v)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("anonymous callers made %d override lookups", n)
	}
	// the tenant is what marks an anonymous caller, not the call that
	// admitted it: a later unit of work of a caller Decide admitted
	// (CheckRoute, one more message on a stream), or the limiter given
	// that tenant, looks nothing up either
	v := g.Decide(context.Background(), gate.Endpoint{Pattern: "/x", ClientIP: "198.51.100.1"})
	if !v.Proceed {
		t.Fatalf("%+v", v)
	}
	if w := g.CheckRoute(context.Background(), v.Tenant, v.Route); !w.Proceed {
		t.Fatalf("CheckRoute: %+v", w)
	}
	if _, err := l.Check(context.Background(), core.Request{Tenant: v.Tenant}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("an anonymous caller's later checks made %d override lookups", n)
	}
	// an authenticated tenant still gets its overrides looked up
	g.Decide(gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "acme"}), gate.Endpoint{Pattern: "/x"})
	if n := calls.Load(); n != 1 {
		t.Fatalf("authenticated tenant: %d lookups, want 1", n)
	}
}

// A verified tenant whose ID is spelled like an anonymous caller's
// ("anonymous:<ip>") and the anonymous caller at that address never meet in
// one bucket: neither can drain the other's quota, in Redis or in the deny
// cache. The gate refuses the verified ID (400, ErrInvalidRequest) rather
// than charge it to the anonymous caller's key, and leaves that key alone.
func TestGateAnonymousKeySpaceApart(t *testing.T) {
	forEachVariant(t, func(t *testing.T, vr variant) {
		c := redistest.Client(t)
		res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
			"free":      {Classes: map[string]quota.Quota{"default": {Capacity: 1, RefillPerSecond: 0.001}}},
			"anonymous": {Classes: map[string]quota.Quota{"default": {Capacity: 1, RefillPerSecond: 0.001}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		prefix := redistest.Prefix(t)
		l := vr.newLimiter(t, c, res, core.WithPrefix(prefix))
		g, err := gate.New(l, gate.WithAnonymous(""))
		if err != nil {
			t.Fatal(err)
		}
		ks, err := keys.New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		anonKey, err := ks.Bucket("anonymous:203.0.113.9", "default")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ep := gate.Endpoint{Method: "GET", Pattern: "/x", ClientIP: "203.0.113.9"}
		impostor := gate.ContextWithTenant(ctx, quota.Tenant{ID: "anonymous:203.0.113.9", Tier: "free"})

		// the verified tenant first: it must not spend the anonymous quota
		for i := range 3 {
			v := g.Decide(impostor, ep)
			if v.Decision.Reason == core.ReasonOverLimit || v.Proceed {
				t.Fatalf("verified tenant call %d was charged in the anonymous caller's bucket: %+v", i, v)
			}
			if v.Status != 400 || !errors.Is(v.Err, core.ErrInvalidRequest) {
				t.Fatalf("verified tenant call %d: status %d, err %v; want 400 and ErrInvalidRequest", i, v.Status, v.Err)
			}
		}
		if n, err := c.Exists(ctx, anonKey).Result(); err != nil || n != 0 {
			t.Fatalf("the verified tenant wrote the anonymous caller's key %s (exists %d, %v)", anonKey, n, err)
		}
		// the anonymous caller still has its whole quota, and spends it
		if v := g.Decide(ctx, ep); !v.Proceed || v.Tenant.ID != "anonymous:203.0.113.9" || v.Decision.Remaining != 0 {
			t.Fatalf("anonymous caller after the verified tenant: %+v", v)
		}
		if v := g.Decide(ctx, ep); v.Proceed || v.Status != 429 {
			t.Fatalf("anonymous caller's second call: %+v", v)
		}
		// its empty bucket (and a cached denial) is still not the verified
		// tenant's: that one is refused, never denied over limit
		if v := g.Decide(impostor, ep); v.Decision.Reason == core.ReasonOverLimit || v.Status != 400 {
			t.Fatalf("verified tenant after the anonymous caller drained its bucket: %+v", v)
		}
		// a tenant ID that only looks similar keeps working, on its own key
		for _, id := range []string{"anonymous", "anonymous203.0.113.9", "Anonymous:203.0.113.9", "anonymous%3A203.0.113.9"} {
			tctx := gate.ContextWithTenant(ctx, quota.Tenant{ID: id, Tier: "free"})
			if v := g.Decide(tctx, ep); !v.Proceed || v.Err != nil {
				t.Fatalf("tenant %q: %+v", id, v)
			}
		}
	})
}
