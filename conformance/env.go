package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	tgrender "github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Quotas of the scenarios (C burst, ρ tokens/s).
var scenarioTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
	"free": {Classes: map[string]quota.Quota{
		"default": {Capacity: 3, RefillPerSecond: 1},
		"export":  {Capacity: 10, RefillPerSecond: 0.4},
		"items":   {Capacity: 2, RefillPerSecond: 0.5},
	}},
	// pro has a tenant-wide ceiling beside its classes (multi-bucket).
	"pro": {Classes: map[string]quota.Quota{
		"default": {Capacity: 5, RefillPerSecond: 1},
		"export":  {Capacity: 10, RefillPerSecond: 1},
		"items":   {Capacity: 2, RefillPerSecond: 0.5},
	}, Ceiling: &quota.Quota{Capacity: 6, RefillPerSecond: 0.5}},
	// small's export bucket is smaller than an export's cost.
	"small": {Classes: map[string]quota.Quota{
		"default": {Capacity: 3, RefillPerSecond: 1},
		"export":  {Capacity: 3, RefillPerSecond: 0.4},
		"items":   {Capacity: 2, RefillPerSecond: 0.5},
	}},
	// team's export class allows one request in flight per tenant.
	"team": {Classes: map[string]quota.Quota{
		"default": {Capacity: 3, RefillPerSecond: 1},
		"export":  {Capacity: 40, RefillPerSecond: 1, Concurrency: 1},
		"items":   {Capacity: 2, RefillPerSecond: 0.5},
	}},
	"anonymous": {Classes: map[string]quota.Quota{
		"default": {Capacity: 2, RefillPerSecond: 0.1},
		"export":  {Capacity: 4, RefillPerSecond: 0.1},
		"items":   {Capacity: 2, RefillPerSecond: 0.1},
	}},
}}

// scenarioRoutes is every scenario's route table, by endpoint name.
func scenarioRoutes() map[string]gate.Route {
	return map[string]gate.Route{
		EndpointProfile: {Class: "default", Cost: 1},
		EndpointExport:  {Class: "export", Cost: 4},
		EndpointHealth:  {Exempt: true},
		EndpointItem:    {Class: "items", Cost: 1},
	}
}

// backend is where a scenario's limiter keeps its buckets.
type backend uint8

const (
	standalone backend = iota
	cluster
	deadStandalone
	deadCluster
	paused // a private server, frozen with SIGSTOP
)

func (b backend) String() string {
	return [...]string{"standalone", "cluster", "dead-standalone", "dead-cluster", "paused"}[b]
}

// config is a scenario's limiter and adapter configuration.
type config struct {
	policy    core.FailurePolicy
	timeout   time.Duration
	shadow    bool
	style     *tgrender.HeaderStyle
	anonymous bool
	// serverClock runs the limiter on Redis TIME instead of the fake clock.
	serverClock bool
	// costReports: the handlers report actual costs (Setup.CostReports).
	costReports bool
	// catchAll: the service registers a catch-all handler (Setup.CatchAll).
	catchAll bool
}

// env is one run of one scenario on one backend.
type env struct {
	t       *testing.T
	target  Target
	proto   Protocol
	cfg     config
	clock   *testkit.FakeClock
	client  redis.UniversalClient
	server  *redistest.Server
	prefix  string
	backend backend
	tr      transcript
	// metrics reads what the env's limiters recorded (core's instruments)
	metrics *sdkmetric.ManualReader
	meter   *sdkmetric.MeterProvider

	mu   sync.Mutex
	errs []error
}

func newEnv(t *testing.T, target Target, b backend, cfg config) *env {
	e := &env{t: t, target: target, proto: target.Protocol(), cfg: cfg, clock: testkit.NewFakeClock(), backend: b, prefix: redistest.Prefix(t)}
	e.metrics = sdkmetric.NewManualReader()
	e.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.metrics))
	t.Cleanup(func() { _ = e.meter.Shutdown(context.Background()) })
	switch b {
	case standalone:
		e.client = redistest.Client(t)
	case cluster:
		e.client = redistest.SharedCluster(t)
	case deadStandalone:
		c := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		e.client = c
	case deadCluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{deadAddr(t)}, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		e.client = c
	case paused:
		e.server = redistest.NewServer(t)
		e.client = e.server.Client(t)
	}
	return e
}

// deadAddr returns an address where nothing listens.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// limiter builds a limiter over the env's Redis, as a replica would.
func (e *env) limiter() *core.Limiter {
	e.t.Helper()
	res, err := quota.NewResolver(scenarioTiers)
	if err != nil {
		e.t.Fatalf("conformance: resolver: %v", err)
	}
	timeout := e.cfg.timeout
	if timeout == 0 {
		// generous: a loaded CI machine must not turn a scenario into a
		// store failure
		timeout = 5 * time.Second
	}
	opts := []core.Option{
		core.WithPrefix(e.prefix), core.WithTimeout(timeout), core.WithFailurePolicy(e.cfg.policy),
		core.WithShadow(e.cfg.shadow), core.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		core.WithMeterProvider(e.meter),
	}
	if !e.cfg.serverClock {
		opts = append(opts, core.WithClock(e.clock.Now))
	}
	l, err := core.New(e.client, res, opts...)
	if err != nil {
		e.t.Fatalf("conformance: limiter: %v", err)
	}
	e.t.Cleanup(func() { _ = l.Close() }) // after the instance's own cleanup
	return l
}

// instance builds one instance of the target (one replica).
func (e *env) instance() Instance {
	e.t.Helper()
	style := tgrender.DefaultHeaderStyle
	if e.cfg.style != nil {
		style = *e.cfg.style
	}
	s := Setup{
		Limiter:     e.limiter(),
		Routes:      scenarioRoutes(),
		HeaderStyle: style,
		Anonymous:   e.cfg.anonymous,
		CostReports: e.cfg.costReports,
		CatchAll:    e.cfg.catchAll,
		OnError: func(err error) {
			e.mu.Lock()
			e.errs = append(e.errs, err)
			e.mu.Unlock()
		},
	}
	inst, err := e.target.NewInstance(e.t, s)
	if s.CostReports && errors.Is(err, ErrNoCostReports) {
		e.t.Skip(err.Error())
	}
	if err != nil {
		e.t.Fatalf("conformance: NewInstance: %v", err)
	}
	if inst == nil {
		e.t.Fatal("conformance: NewInstance returned a nil Instance")
	}
	return inst
}

// errors returns what the error hook received.
func (e *env) hookErrors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// describe is a request's line in a transcript.
func describe(r Request) string {
	var b strings.Builder
	if r.Method != "" {
		b.WriteString(r.Method + " ")
	}
	b.WriteString(r.Endpoint)
	if r.Param != "" {
		b.WriteString("/" + r.Param)
	}
	if r.Tenant != "" {
		b.WriteString(" as " + r.Tenant)
		if r.Tier != "" {
			b.WriteString(" (" + r.Tier + ")")
		}
	} else {
		b.WriteString(" without identity")
	}
	if r.ClientIP != "" {
		b.WriteString(" from " + r.ClientIP)
	}
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString(" [" + k + ": " + r.Header[k] + "]")
	}
	return b.String()
}

// do sends r to inst, checks the response's invariants and records it.
func (e *env) do(inst Instance, r Request) entry {
	e.t.Helper()
	res, err := inst.Do(r)
	if err != nil {
		e.t.Fatalf("conformance: %s: Do: %v", describe(r), err)
	}
	en := entry{request: describe(r), status: res.Status, headers: normalise(res.Header, RelevantHeaders), head: r.Method == "HEAD"}
	switch {
	case res.Status == 200 || res.Status == 404 || res.Status == 405:
		// a 200 body and its type are the handler's, not the limiter's; a
		// 404 or 405 is the framework's own answer
		en.headers = slices.DeleteFunc(en.headers, func(h [2]string) bool { return h[0] == "Content-Type" })
	case en.head:
		// a response to HEAD has no content (RFC 9110 §9.3.2): whether the
		// framework drops the body written for it is not the limiter's
	default:
		en.body = string(res.Body)
	}
	e.checkInvariants(en)
	e.tr.add(en)
	return en
}

// send records and returns the exchange for a request of endpoint by tenant.
func (e *env) send(inst Instance, endpoint, tenant, tier string) entry {
	e.t.Helper()
	return e.do(inst, Request{Endpoint: endpoint, Tenant: tenant, Tier: tier})
}

// note records a line in the transcript.
func (e *env) note(format string, args ...any) { e.tr.add(entry{note: fmt.Sprintf(format, args...)}) }

// advance moves the fake clock and records it.
func (e *env) advance(d time.Duration) {
	e.clock.Advance(d)
	e.note("clock +%v", d)
}

// calls records the handler call count.
func (e *env) calls(inst Instance) int {
	n := inst.HandlerCalls()
	e.note("handler calls: %d", n)
	return n
}

// keys records the Redis keys the scenario wrote, with the random prefix
// shown as "rl", and their TTL state.
func (e *env) keys() []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			if ttl <= 0 {
				e.t.Errorf("conformance: key %s has no TTL (%v)", k, ttl)
			}
			if strings.Contains(k, ":settled:") {
				// a settled reservation's mark (TTL checked above): its
				// name is random, and a settle's effect is in the buckets
				continue
			}
			mu.Lock()
			keys = append(keys, "rl"+strings.TrimPrefix(k, e.prefix))
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, e.client)
	}
	if err != nil {
		e.t.Fatalf("conformance: scan keys: %v", err)
	}
	sort.Strings(keys)
	e.note("redis keys: %s", strings.Join(keys, " "))
	return keys
}

// header returns the value of name in en ("" when absent).
func (en entry) header(name string) string {
	for _, h := range en.headers {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

func (en entry) has(name string) bool {
	for _, h := range en.headers {
		if strings.EqualFold(h[0], name) {
			return true
		}
	}
	return false
}

var rateLimitHeaders = []string{"Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "Ratelimit-Remaining",
	"Ratelimit-Reset", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// checkInvariants holds every response to the rules of the standard that
// do not depend on the numbers, so that a divergence is caught even where
// a golden transcript would be regenerated.
func (e *env) checkInvariants(en entry) {
	e.t.Helper()
	fail := func(format string, args ...any) {
		e.t.Errorf("conformance: %s -> %d: %s", en.request, en.status, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, h := range en.headers {
		n := strings.ToLower(h[0])
		if seen[n] {
			fail("header %s sent twice", h[0])
		}
		seen[n] = true
	}
	switch en.status {
	case 200:
		if en.has("Retry-After") {
			fail("Retry-After on an admitted response")
		}
	case 429:
		if ra := en.header("Retry-After"); ra != "" {
			n, err := strconv.ParseInt(ra, 10, 64)
			if err != nil || n < 1 {
				fail("Retry-After %q is not an integer >= 1 (delta seconds)", ra)
			}
			if rl := en.header("Ratelimit"); rl != "" && !strings.HasSuffix(rl, ";t="+ra) {
				fail("RateLimit %q: t must equal Retry-After %s", rl, ra)
			}
		}
		e.checkProblem(en, 429)
	case 401, 503:
		for _, h := range rateLimitHeaders {
			if en.has(h) {
				fail("%s on a %d (no quota was checked)", h, en.status)
			}
		}
		if en.status == 401 && e.proto == ProtocolHTTP && en.header("Www-Authenticate") != "Bearer" {
			fail("a 401 must challenge with WWW-Authenticate: Bearer, got %q", en.header("Www-Authenticate"))
		}
		e.checkProblem(en, en.status)
	case 404, 405:
		// the framework's answer to a request no route matched: nothing was
		// checked, so nothing is reported
		var sent []string
		for _, h := range rateLimitHeaders {
			if en.has(h) {
				sent = append(sent, h)
			}
		}
		if len(sent) > 0 {
			fail("%s on a %d (no route matched, nothing may be charged)", strings.Join(sent, ", "), en.status)
		}
		if en.has("Www-Authenticate") {
			fail("WWW-Authenticate on a %d (no route matched)", en.status)
		}
	default:
		fail("unexpected status (want 200, 401, 429, 503, or 404/405 for no route); body %q", en.body)
	}
}

func (e *env) checkProblem(en entry, status int) {
	e.t.Helper()
	if e.proto != ProtocolHTTP {
		return
	}
	if ct := en.header("Content-Type"); ct != tgrender.ProblemContentType {
		e.t.Errorf("conformance: %s -> %d: Content-Type %q, want %q", en.request, en.status, ct, tgrender.ProblemContentType)
	}
	if en.head {
		return // no content to check
	}
	var p tgrender.Problem
	if err := json.Unmarshal([]byte(en.body), &p); err != nil || p.Status != status || p.Type == "" || p.Title == "" {
		e.t.Errorf("conformance: %s -> %d: body is not an RFC 9457 problem with status %d: %q (%v)", en.request, en.status, status, en.body, err)
	}
}

// checkGolden compares the env's transcript with the scenario's golden file.
func (e *env) checkGolden(name string) {
	e.t.Helper()
	e.tr.mu.Lock()
	got := slices.Clone(e.tr.entries)
	e.tr.mu.Unlock()
	if msg := checkGolden(name, got, e.proto); msg != "" {
		e.t.Error("conformance: " + msg)
	}
}

// expectNoHookErrors fails when the error hook was called.
func (e *env) expectNoHookErrors() {
	e.t.Helper()
	if errs := e.hookErrors(); len(errs) > 0 {
		e.t.Errorf("conformance: the error hook got %d errors with a healthy Redis, first %v", len(errs), errs[0])
	}
}

// expectStoreErrors fails unless the error hook got n errors wrapping
// core.ErrStore.
func (e *env) expectStoreErrors(n int) {
	e.t.Helper()
	errs := e.hookErrors()
	if len(errs) != n {
		e.t.Errorf("conformance: the error hook got %d errors, want %d (one per request the store failed)", len(errs), n)
	}
	for _, err := range errs {
		if !errors.Is(err, core.ErrStore) {
			e.t.Errorf("conformance: the error hook got %v, want an error wrapping core.ErrStore", err)
		}
	}
}

// decisions returns the tollgate.decisions counts the env's limiters
// recorded, by "outcome/class".
func (e *env) decisions() map[string]int64 {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.metrics.Collect(context.Background(), &rm); err != nil {
		e.t.Fatalf("conformance: collect metrics: %v", err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "tollgate.decisions" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				o, _ := dp.Attributes.Value(attribute.Key("outcome"))
				c, _ := dp.Attributes.Value(attribute.Key("class"))
				out[o.AsString()+"/"+c.AsString()] += dp.Value
			}
		}
	}
	return out
}
