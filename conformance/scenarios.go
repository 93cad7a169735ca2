package conformance

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	tgrender "github.com/tollgate-go/tollgate/core/render"
)

// scenario is one named behaviour of the standard.
type scenario struct {
	name string
	// backends to run on; default standalone and cluster.
	backends []backend
	cfg      config
	// golden: the transcript must match testdata/<name>.golden.
	golden bool
	// httpOnly scenarios are about HTTP routing (methods, unmatched
	// paths); gRPC targets skip them.
	httpOnly bool
	run      func(e *env)
}

var redisBackends = []backend{standalone, cluster}

// onlyBackends, when set (by this package's tests), restricts the backends
// scenarios run on, by name.
var onlyBackends []string

func style(s tgrender.HeaderStyle) *tgrender.HeaderStyle { return &s }

// scenarios returns the suite, in a fixed order.
func scenarios() []scenario {
	return []scenario{
		{name: "burst-then-deny", golden: true, run: burstThenDeny},
		{name: "refill", golden: true, run: refill},
		{name: "retry-after-ceil", golden: true, run: retryAfterCeil},
		{name: "cost-classes", golden: true, run: costClasses},
		{name: "route-template", golden: true, run: routeTemplate},
		{name: "head-as-get", httpOnly: true, run: headAsGet},
		{name: "unmatched-route", httpOnly: true, run: unmatchedRoute},
		{name: "catch-all", cfg: config{catchAll: true}, run: catchAll},
		{name: "multi-bucket", golden: true, run: multiBucket},
		{name: "cost-exceeds-capacity", golden: true, run: costExceedsCapacity},
		{name: "concurrency-limit", golden: true, run: concurrencyLimit},
		{name: "tenant-isolation", golden: true, run: tenantIsolation},
		{name: "redis-keys", golden: true, run: redisKeys},
		{name: "forged-tenant-header", golden: true, run: forgedTenantHeader},
		{name: "no-tenant", golden: true, run: noTenant},
		{name: "anonymous", golden: true, cfg: config{anonymous: true}, run: anonymous},
		{name: "header-style-epoch", golden: true, cfg: config{style: style(tgrender.HeaderIETF | tgrender.HeaderXRateLimitEpoch)}, run: headerStyle},
		{name: "header-style-draft06", golden: true, cfg: config{style: style(tgrender.HeaderDraft06)}, run: headerStyle},
		{name: "header-style-none", golden: true, cfg: config{style: style(tgrender.HeaderNone)}, run: headerStyle},
		{name: "shadow", golden: true, cfg: config{shadow: true}, run: shadow},
		{name: "settle-refund", golden: true, cfg: config{costReports: true}, run: settleRefund},
		{name: "settle-debt", golden: true, cfg: config{costReports: true}, run: settleDebt},
		{name: "settle-no-report", golden: true, cfg: config{costReports: true}, run: settleNoReport},
		{name: "fail-open", golden: true, backends: []backend{deadStandalone, deadCluster}, cfg: config{policy: core.FailOpen, timeout: 300 * time.Millisecond}, run: failOpen},
		{name: "fail-closed", golden: true, backends: []backend{deadStandalone, deadCluster}, cfg: config{policy: core.FailClosed, timeout: 300 * time.Millisecond}, run: failClosed},
		{name: "hung-redis-fail-open", backends: []backend{paused}, cfg: config{policy: core.FailOpen, timeout: 150 * time.Millisecond}, run: hungRedis},
		{name: "hung-redis-fail-closed", backends: []backend{paused}, cfg: config{policy: core.FailClosed, timeout: 150 * time.Millisecond}, run: hungRedis},
		{name: "replicas", run: replicas},
		{name: "server-clock-refill", cfg: config{serverClock: true}, run: serverClockRefill},
	}
}

func runScenarios(t *testing.T, target Target) {
	for _, sc := range scenarios() {
		if sc.httpOnly && target.Protocol() != ProtocolHTTP {
			continue // an HTTP routing scenario: gRPC has no HEAD, no 404/405
		}
		t.Run(sc.name, func(t *testing.T) {
			backends := sc.backends
			if backends == nil {
				backends = redisBackends
			}
			for _, b := range backends {
				if onlyBackends != nil && !slices.Contains(onlyBackends, b.String()) {
					continue
				}
				t.Run(b.String(), func(t *testing.T) {
					t.Parallel()
					e := newEnv(t, target, b, sc.cfg)
					sc.run(e)
					if sc.golden && !t.Failed() {
						e.checkGolden(sc.name)
					}
				})
			}
		})
	}
}

// want fails the scenario unless got == want.
func want[T comparable](e *env, what string, got, want T) {
	e.t.Helper()
	if got != want {
		e.t.Errorf("conformance: %s = %v, want %v", what, got, want)
	}
}

func wantStatus(e *env, en entry, status int) {
	e.t.Helper()
	if en.status != status {
		e.t.Errorf("conformance: %s -> %d, want %d", en.request, en.status, status)
	}
}

// Burst then deny: a full bucket admits its capacity, counting Remaining
// down, then denies with 429 and Retry-After; the denial never reaches the
// handler.
func burstThenDeny(e *env) {
	in := e.instance()
	for i := range 3 {
		en := e.send(in, EndpointProfile, "acme", "")
		wantStatus(e, en, 200)
		if e.proto == ProtocolHTTP {
			want(e, "X-RateLimit-Remaining", en.header("X-Ratelimit-Remaining"), fmt.Sprint(2-i))
		}
	}
	en := e.send(in, EndpointProfile, "acme", "")
	wantStatus(e, en, 429)
	want(e, "Retry-After", en.header("Retry-After"), "1")
	en = e.send(in, EndpointProfile, "acme", "")
	wantStatus(e, en, 429)
	want(e, "handler calls", e.calls(in), 3)
	e.expectNoHookErrors()
}

// Refill after waiting: tokens come back at the refill rate, and a partial
// token is not a request.
func refill(e *env) {
	in := e.instance()
	for range 3 {
		e.send(in, EndpointProfile, "acme", "")
	}
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 429)
	e.advance(time.Second)
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	e.advance(500 * time.Millisecond)
	en := e.send(in, EndpointProfile, "acme", "")
	wantStatus(e, en, 429)
	want(e, "Retry-After after half a token", en.header("Retry-After"), "1")
	e.advance(2500 * time.Millisecond)
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	e.advance(time.Minute)
	en = e.send(in, EndpointProfile, "acme", "")
	wantStatus(e, en, 200)
	want(e, "handler calls", e.calls(in), 6)
	e.expectNoHookErrors()
}

// Retry-After is ceil((k − τ)/ρ) in whole seconds, at least 1.
func retryAfterCeil(e *env) {
	in := e.instance()
	// export: C=10, ρ=0.4/s, cost 4
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200)
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200)
	en := e.send(in, EndpointExport, "acme", "") // τ=2: (4−2)/0.4 = 5 s
	want(e, "Retry-After (exact 5 s)", en.header("Retry-After"), "5")
	e.advance(1300 * time.Millisecond) // τ=2.52: 3.7 s
	en = e.send(in, EndpointExport, "acme", "")
	want(e, "Retry-After (3.7 s)", en.header("Retry-After"), "4")
	e.advance(3450 * time.Millisecond) // τ=3.9: 0.25 s
	en = e.send(in, EndpointExport, "acme", "")
	want(e, "Retry-After (0.25 s)", en.header("Retry-After"), "1")
	e.advance(250 * time.Millisecond)
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200)
	want(e, "handler calls", e.calls(in), 3)
	e.expectNoHookErrors()
}

// Cost classes and weights per route: each class is its own bucket, each
// route has its cost, an exempt route is never limited.
func costClasses(e *env) {
	in := e.instance()
	en := e.send(in, EndpointExport, "acme", "")
	wantStatus(e, en, 200)
	for range 3 {
		wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	}
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 429)
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200) // its own bucket
	for range 5 {
		en := e.send(in, EndpointHealth, "acme", "")
		wantStatus(e, en, 200)
		if en.has("Ratelimit") || en.has("X-Ratelimit-Limit") {
			e.t.Errorf("conformance: an exempt route carries rate-limit headers")
		}
	}
	want(e, "handler calls", e.calls(in), 10)
	e.keys()
	e.expectNoHookErrors()
}

// The route is the framework's template, never the raw URL: different
// items share one class.
func routeTemplate(e *env) {
	in := e.instance()
	for _, id := range []string{"1", "2", "three"} {
		e.do(in, Request{Endpoint: EndpointItem, Param: id, Tenant: "acme"})
	}
	e.calls(in)
	if keys := e.keys(); len(keys) != 1 {
		e.t.Errorf("conformance: items wrote keys %v, want the one class bucket", keys)
	}
	e.expectNoHookErrors()
}

// HEAD is charged as the GET route the framework runs for it (net/http's
// ServeMux, Fiber): the same class and cost, one bucket with GET, never
// the default route; an exempt GET route is exempt for HEAD too. A
// framework that runs no GET handler for HEAD answers it 404 or 405, and
// then nothing is charged. The transcripts differ by framework, so the
// scenario asserts instead of comparing with a golden file.
func headAsGet(e *env) {
	in := e.instance()
	head := func(id string) entry {
		return e.do(in, Request{Endpoint: EndpointItem, Method: http.MethodHead, Param: id, Tenant: "acme"})
	}
	get := func(id string) entry { return e.do(in, Request{Endpoint: EndpointItem, Param: id, Tenant: "acme"}) }
	first := head("1")
	switch first.status {
	case 200: // the framework runs GET for HEAD: charged as GET /v1/items/{id}
		want(e, "RateLimit-Policy of HEAD item", first.header("Ratelimit-Policy"), `"items";q=2;w=4`)
		want(e, "RateLimit of HEAD item", first.header("Ratelimit"), `"items";r=1;t=2`)
		wantStatus(e, head("2"), 200)
		en := head("3")
		wantStatus(e, en, 429)
		want(e, "RateLimit-Policy of the denied HEAD", en.header("Ratelimit-Policy"), `"items";q=2;w=4`)
		wantStatus(e, get("4"), 429) // HEAD drew on GET's bucket
		want(e, "handler calls", e.calls(in), 2)
		en = e.do(in, Request{Endpoint: EndpointHealth, Method: http.MethodHead})
		wantStatus(e, en, 200)
		if en.has("Ratelimit") || en.has("X-Ratelimit-Limit") {
			e.t.Errorf("conformance: HEAD of an exempt route carries rate-limit headers")
		}
		want(e, "handler calls", e.calls(in), 3)
	case 404, 405: // no route for HEAD: nothing charged
		for range 5 {
			en := head("2")
			if en.status != first.status {
				e.t.Errorf("conformance: %s -> %d, then %d", en.request, first.status, en.status)
			}
		}
		wantStatus(e, get("1"), 200)
		wantStatus(e, get("2"), 200)
		wantStatus(e, get("3"), 429)
		want(e, "handler calls", e.calls(in), 2)
		en := e.do(in, Request{Endpoint: EndpointHealth, Method: http.MethodHead})
		if en.status != 404 && en.status != 405 {
			e.t.Errorf("conformance: %s -> %d; the framework answered HEAD item %d", en.request, en.status, first.status)
		}
	default:
		e.t.Errorf("conformance: %s -> %d, want 200 (HEAD runs GET) or 404/405 (no HEAD route)", first.request, first.status)
	}
	if keys := e.keys(); fmt.Sprint(keys) != "[rl:{acme}:items]" {
		e.t.Errorf("conformance: HEAD and GET of items wrote keys %v, want only the items bucket", keys)
	}
	e.expectNoHookErrors()
}

// A request no route matches (no path, or no route for its method) is the
// framework's 404 or 405: it is charged nothing, carries no rate-limit
// headers, and is not refused for want of a tenant. Where the framework
// runs middleware for it (a global middleware, a group's not-found route)
// the adapter must still stand aside.
func unmatchedRoute(e *env) {
	in := e.instance()
	for _, r := range []Request{
		{Endpoint: EndpointUnrouted, Tenant: "acme"},
		{Endpoint: EndpointProfile, Method: http.MethodDelete, Tenant: "acme"},
		{Endpoint: EndpointUnrouted},
		{Endpoint: EndpointProfile, Method: http.MethodDelete},
	} {
		for range 4 {
			en := e.do(in, r)
			if en.status != 404 && en.status != 405 {
				e.t.Errorf("conformance: %s -> %d, want the framework's 404 or 405", en.request, en.status)
			}
		}
	}
	want(e, "handler calls", e.calls(in), 0)
	if keys := e.keys(); len(keys) != 0 {
		e.t.Errorf("conformance: unmatched requests wrote keys %v", keys)
	}
	// the default bucket is full: nothing was charged to it
	for i := range 3 {
		en := e.send(in, EndpointProfile, "acme", "")
		wantStatus(e, en, 200)
		want(e, "X-RateLimit-Remaining", en.header("X-Ratelimit-Remaining"), fmt.Sprint(2-i))
	}
	want(e, "handler calls", e.calls(in), 3)
	e.expectNoHookErrors()
}

// A catch-all handler the service registered (Gin's NoRoute, Echo's
// RouteNotFound, a ServeMux "/" pattern, a Fiber app.Use after the routes,
// gRPC's unknown-service handler) runs the service's code for a request no
// route matches: the request is charged as the default route, never let
// through as the framework's own 404 is (unmatched-route). On pro's default
// bucket of 5, 5 of 30 requests to unknown paths reach the handler and 25
// are denied; a caller without identity is refused 401; nothing else is
// charged.
func catchAll(e *env) {
	in := e.instance()
	admitted, denied := 0, 0
	for i := range 30 {
		en := e.do(in, Request{Endpoint: EndpointUnrouted, Param: fmt.Sprint("p", i), Tenant: "acme", Tier: "pro"})
		switch en.status {
		case 200:
			admitted++
		case 429:
			denied++
		default:
			e.t.Errorf("conformance: %s -> %d, want 200 (the catch-all handler ran, charged) or 429", en.request, en.status)
		}
	}
	want(e, "requests to the catch-all admitted", admitted, 5)
	want(e, "requests to the catch-all denied 429", denied, 25)
	want(e, "handler calls", e.calls(in), 5)
	// the catch-all needs an identity as any charged route does
	en := e.do(in, Request{Endpoint: EndpointUnrouted})
	wantStatus(e, en, 401)
	want(e, "handler calls", e.calls(in), 5)
	// the default bucket, and pro's tenant ceiling beside it
	if keys := e.keys(); fmt.Sprint(keys) != "[rl:{acme}:default rl:{acme}:tenant]" {
		e.t.Errorf("conformance: catch-all requests wrote keys %v, want acme's default bucket and ceiling", keys)
	}
	// the bucket the catch-all drained is the default route's
	en = e.send(in, EndpointProfile, "acme", "pro")
	wantStatus(e, en, 429)
	e.expectNoHookErrors()
}

// A tenant ceiling beside the class: all-or-nothing, the binding bucket is
// reported, a denial by one bucket charges none.
func multiBucket(e *env) {
	in := e.instance()
	// pro: default C=5 ρ=1, export C=10 ρ=1, ceiling C=6 ρ=0.5
	e.send(in, EndpointProfile, "initech", "pro")
	e.send(in, EndpointProfile, "initech", "pro")
	en := e.send(in, EndpointExport, "initech", "pro") // ceiling 4 → 0
	wantStatus(e, en, 200)
	en = e.send(in, EndpointProfile, "initech", "pro") // default has 3, ceiling 0
	wantStatus(e, en, 429)
	want(e, "binding policy", en.header("Ratelimit-Policy"), `"tenant";q=6;w=12`)
	e.advance(2 * time.Second) // ceiling +1; default unchanged by the denial
	en = e.send(in, EndpointProfile, "initech", "pro")
	wantStatus(e, en, 200)
	e.calls(in)
	e.keys()
	e.expectNoHookErrors()
}

// Concurrency limit: team's export class allows one request of a tenant in
// flight. The adapter holds the slot while the handler runs and frees it
// when the handler returns, before the response is had (a leaked slot, or
// one freed later, denies the next export); while
// another replica's export of the tenant holds it, an export is denied 429
// with a reason of its own, the concurrency policy beside the rate policy
// in the headers, and charged nothing; other classes and tenants proceed.
func concurrencyLimit(e *env) {
	in := e.instance()
	ctx := context.Background()
	key := e.prefix + ":{umbrella}:export:slots"
	watch := e.holdsSlotInHandler(in, key)
	// one after the other: the first's slot is free when its response is
	// had
	watch(true)
	for range 2 {
		wantStatus(e, e.send(in, EndpointExport, "umbrella", "team"), 200)
	}
	watch(false)
	e.slotsFreed(key)
	other := e.limiter()
	d, err := other.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "umbrella", Tier: "team"}, Class: "export", Cost: 4})
	if err != nil || d.Slot == nil {
		e.t.Fatalf("conformance: another replica's export: %v, %v", d.Reason, err)
	}
	e.note("another replica's export of umbrella is in flight")
	en := e.send(in, EndpointExport, "umbrella", "team")
	wantStatus(e, en, 429)
	e.checkProblem(en, 429)
	wantStatus(e, e.send(in, EndpointProfile, "umbrella", "team"), 200)
	wantStatus(e, e.send(in, EndpointExport, "hooli", "team"), 200)
	e.slotsFreed(e.prefix + ":{hooli}:export:slots")
	d.Slot.Release()
	e.slotsFreed(key)
	e.note("it returned")
	watch(true)
	wantStatus(e, e.send(in, EndpointExport, "umbrella", "team"), 200)
	watch(false)
	e.slotsFreed(key)
	e.calls(in)
	e.keys()
	e.expectNoHookErrors()
}

// holdsSlotInHandler returns a switch: on, the handlers of in (when the
// suite can reach their Counter) check that the slot set key holds the
// request's slot while they run, for as long as a release would take to
// reach Redis (the limiter's timeout, or a second).
func (e *env) holdsSlotInHandler(in Instance, key string) func(on bool) {
	c, ok := in.(counted)
	if !ok {
		return func(bool) {}
	}
	check := func() {
		deadline := time.Now().Add(max(e.cfg.timeout, time.Second))
		for time.Now().Before(deadline) {
			n, err := e.client.ZCard(context.Background(), key).Result()
			if err != nil || n == 0 {
				e.t.Errorf("conformance: while the handler ran, its concurrency slot was not held (%d slots, %v): released before the handler returned", n, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return func(on bool) {
		if on {
			c.counter().during.Store(&check)
		} else {
			c.counter().during.Store(nil)
		}
	}
}

// slotsFreed waits until the slot set key is empty: a request that ended
// released its slot (in the background, within the limiter's timeout). It
// records the wait's outcome.
func (e *env) slotsFreed(key string) {
	e.t.Helper()
	budget := 2*max(e.cfg.timeout, 5*time.Second) + time.Second
	deadline := time.Now().Add(budget)
	for {
		n, err := e.client.ZCard(context.Background(), key).Result()
		if err == nil && n == 0 {
			e.note("slots held: 0")
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("conformance: %d concurrency slots still held %v after the requests ended (%v): a slot is not released", n, budget, err)
			e.note("slots held: %d", n)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Cost > capacity: 429 with no Retry-After (never satisfiable), nothing
// charged.
func costExceedsCapacity(e *env) {
	in := e.instance()
	for range 2 {
		en := e.send(in, EndpointExport, "hooli", "small") // cost 4 > C 3
		wantStatus(e, en, 429)
		if en.has("Retry-After") {
			e.t.Errorf("conformance: cost > capacity answered with Retry-After %s; it can never be met", en.header("Retry-After"))
		}
	}
	e.advance(time.Hour)
	wantStatus(e, e.send(in, EndpointExport, "hooli", "small"), 429)
	wantStatus(e, e.send(in, EndpointProfile, "hooli", "small"), 200)
	want(e, "handler calls", e.calls(in), 1)
	e.expectNoHookErrors()
}

// One tenant's exhaustion does not touch another's bucket.
func tenantIsolation(e *env) {
	in := e.instance()
	for range 4 {
		e.send(in, EndpointProfile, "acme", "")
	}
	en := e.send(in, EndpointProfile, "globex", "")
	wantStatus(e, en, 200)
	if e.proto == ProtocolHTTP {
		want(e, "globex's Remaining", en.header("X-Ratelimit-Remaining"), "2")
	}
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 429)
	e.calls(in)
	e.keys()
	e.expectNoHookErrors()
}

// The exact keys, read back from Redis: <prefix>:{tenant}:class, the
// tenant escaped.
func redisKeys(e *env) {
	in := e.instance()
	e.send(in, EndpointProfile, "acme", "")
	e.send(in, EndpointExport, "acme", "")
	e.send(in, EndpointProfile, "odd{ten}:ant", "")
	e.send(in, EndpointProfile, "initech", "pro")
	keys := e.keys()
	wantKeys := []string{"rl:{acme}:default", "rl:{acme}:export", "rl:{initech}:default", "rl:{initech}:tenant", "rl:{odd%7Bten%7D%3Aant}:default"}
	want(e, "keys", fmt.Sprint(keys), fmt.Sprint(wantKeys))
	e.expectNoHookErrors()
}

// A header the client sets never chooses the bucket.
func forgedTenantHeader(e *env) {
	in := e.instance()
	for range 3 {
		e.send(in, EndpointProfile, "acme", "")
	}
	forged := map[string]string{"X-Tenant-Id": "acme"}
	en := e.do(in, Request{Endpoint: EndpointProfile, Tenant: "globex", Header: forged})
	wantStatus(e, en, 200)
	en = e.do(in, Request{Endpoint: EndpointProfile, Tenant: "acme", Header: map[string]string{"X-Tenant-Id": "globex"}})
	wantStatus(e, en, 429)
	en = e.do(in, Request{Endpoint: EndpointProfile, Header: forged})
	wantStatus(e, en, 401)
	want(e, "handler calls", e.calls(in), 4)
	e.keys()
	e.expectNoHookErrors()
}

// No tenant in the context: 401 problem+json, no handler, no key.
func noTenant(e *env) {
	in := e.instance()
	wantStatus(e, e.do(in, Request{Endpoint: EndpointProfile}), 401)
	wantStatus(e, e.do(in, Request{Endpoint: EndpointExport, ClientIP: "192.0.2.7"}), 401)
	want(e, "handler calls", e.calls(in), 0)
	if keys := e.keys(); len(keys) != 0 {
		e.t.Errorf("conformance: an unauthenticated request wrote %v", keys)
	}
	e.expectNoHookErrors()
}

// The anonymous option: callers without identity are keyed by client IP on
// the anonymous tier.
func anonymous(e *env) {
	in := e.instance()
	for range 3 {
		e.do(in, Request{Endpoint: EndpointProfile, ClientIP: "192.0.2.7"})
	}
	wantStatus(e, e.do(in, Request{Endpoint: EndpointProfile, ClientIP: "192.0.2.8"}), 200)
	// a forged forwarding header does not change the caller's address
	en := e.do(in, Request{Endpoint: EndpointProfile, ClientIP: "192.0.2.7", Header: map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Real-Ip": "203.0.113.9"}})
	wantStatus(e, en, 429)
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	want(e, "handler calls", e.calls(in), 4)
	e.keys()
	e.expectNoHookErrors()
}

// Header styles: the same decisions rendered in another style.
func headerStyle(e *env) {
	in := e.instance()
	for range 4 {
		e.send(in, EndpointProfile, "acme", "")
	}
	e.advance(1500 * time.Millisecond)
	e.send(in, EndpointProfile, "acme", "")
	e.calls(in)
	e.expectNoHookErrors()
}

// Shadow mode: would-be denials are let through and reported.
func shadow(e *env) {
	in := e.instance()
	for range 5 {
		wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	}
	wantStatus(e, e.send(in, EndpointExport, "hooli", "small"), 200)
	want(e, "handler calls", e.calls(in), 6)
	e.expectNoHookErrors()
	// what would have been denied is counted as such: 2 over the profile
	// burst of 3, and the export whose cost exceeds its capacity
	got := e.decisions()
	want(e, "shadow_denied decisions (default)", got["shadow_denied/default"], 2)
	want(e, "shadow_denied decisions (export)", got["shadow_denied/export"], 1)
	want(e, "allowed decisions (default)", got["allowed/default"], 3)
}

// Redis down, fail-open: requests pass, with no rate-limit headers; the
// error hook hears of it.
func failOpen(e *env) {
	in := e.instance()
	for range 2 {
		en := e.send(in, EndpointProfile, "acme", "")
		wantStatus(e, en, 200)
	}
	wantStatus(e, e.send(in, EndpointHealth, "acme", ""), 200)
	want(e, "handler calls", e.calls(in), 3)
	e.expectStoreErrors(2)
}

// Redis down, fail-closed: 503 problem+json, never 429; the handler never
// runs.
func failClosed(e *env) {
	in := e.instance()
	for range 2 {
		wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 503)
	}
	wantStatus(e, e.send(in, EndpointHealth, "acme", ""), 200)
	want(e, "handler calls", e.calls(in), 1)
	e.expectStoreErrors(2)
}

// A hung Redis (SIGSTOP: connections open, no answer) is bounded by the
// limiter's timeout, then the failure policy answers.
func hungRedis(e *env) {
	in := e.instance()
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200) // connect while it answers
	if err := e.server.Pause(); err != nil {
		e.t.Fatalf("conformance: pause: %v", err)
	}
	defer func() { _ = e.server.Resume() }()
	status := 200
	if e.cfg.policy == core.FailClosed {
		status = 503
	}
	for range 2 {
		start := time.Now()
		en := e.send(in, EndpointProfile, "acme", "")
		took := time.Since(start)
		wantStatus(e, en, status)
		// the check's timeout, then a probe of twice that, at least 1 s,
		// made twice when this process fell behind during the first (a
		// loaded machine), and half a second for the rest of the request
		probe := max(2*e.cfg.timeout, time.Second)
		if bound := e.cfg.timeout + 2*probe + 500*time.Millisecond; took > bound {
			e.t.Errorf("conformance: a request to a hung Redis took %v with a %v timeout, want at most %v", took, e.cfg.timeout, bound)
		}
	}
	e.expectStoreErrors(2)
}

// Several instances (replicas, each with its own limiter) sharing one
// Redis enforce one limit, under concurrent load.
func replicas(e *env) {
	ins := []Instance{e.instance(), e.instance(), e.instance()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := ins[i%3].Do(Request{Endpoint: EndpointProfile, Tenant: "acme"})
			if err != nil {
				e.t.Errorf("conformance: Do: %v", err)
				return
			}
			mu.Lock()
			codes[res.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	want(e, "admitted by 3 replicas (capacity 3, clock frozen)", codes[200], 3)
	want(e, "denied by 3 replicas", codes[429], 27)
	calls := 0
	for _, in := range ins {
		calls += in.HandlerCalls()
	}
	want(e, "handler calls over the replicas", calls, 3)
	e.expectNoHookErrors()
}

// With the server clock (Redis TIME), real time refills the bucket.
func serverClockRefill(e *env) {
	in := e.instance()
	start := time.Now()
	for range 3 {
		wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	}
	en := e.send(in, EndpointProfile, "acme", "")
	if time.Since(start) < 900*time.Millisecond { // ρ = 1/s: no token can have come back
		wantStatus(e, en, 429)
	}
	time.Sleep(1100 * time.Millisecond)
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)
	e.expectNoHookErrors()
}
