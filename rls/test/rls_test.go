package test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits}
}

// stored reads a bucket's balance from Redis ("<tokens> <last>").
func stored(t *testing.T, c redis.UniversalClient, lim *core.Limiter, tenant, bucket string) float64 {
	t.Helper()
	key, err := lim.Keys().Bucket(tenant, bucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	tok, _, _ := strings.Cut(v, " ")
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		t.Fatalf("GET %s = %q: %v", key, v, err)
	}
	return f
}

func forEachBackend(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	for _, b := range []struct {
		name string
		c    func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.c(t))
		})
	}
}

// A burst of the capacity is admitted counting down, then OVER_LIMIT with
// the bucket's numbers, Retry-After and the problem body.
func TestBurstThenOverLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim)
		req := request(0, desc("tenant", "t42"))
		for i := range 3 {
			res := ask(t, client, req)
			st := res.GetStatuses()[0]
			if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != uint32(2-i) {
				t.Fatalf("request %d: %v", i+1, res)
			}
			// i+1 tokens spent at 1/s: full again in i+1 seconds
			if got := st.GetDurationUntilReset().AsDuration(); got != time.Duration(i+1)*time.Second {
				t.Errorf("request %d: duration_until_reset = %v, want %ds", i+1, got, i+1)
			}
		}
		res := ask(t, client, req)
		st := res.GetStatuses()[0]
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
			t.Fatalf("4th: %v", res)
		}
		if got := st.GetDurationUntilReset().AsDuration(); got != 3*time.Second {
			t.Errorf("4th: duration_until_reset = %v, want 3s", got)
		}
		l := st.GetCurrentLimit()
		if l.GetName() != "default" || l.GetRequestsPerUnit() != 1 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Errorf("current_limit = %v, want default 1/SECOND", l)
		}
		h := headerMap(res)
		if h["Retry-After"] != "1" || h["RateLimit"] != `"default";r=0;t=1` || h["Content-Type"] != render.ProblemContentType {
			t.Errorf("denial headers = %v", h)
		}
		if !strings.Contains(string(res.GetRawBody()), `"status":429`) {
			t.Errorf("raw_body = %s, want the 429 problem", res.GetRawBody())
		}
		clock.Advance(time.Second)
		if res := ask(t, client, req); res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("after 1s: %v, want OK", res)
		}
	})
}

func headerMap(res *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range res.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// hits_addend charges that many tokens: the request's (0 is 1), or the
// descriptor's where set (0 checks without charging), as the reference.
func TestHitsAddend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim)
		res := ask(t, client, request(4, desc("tenant", "t1", "class", "export")))
		if res.GetStatuses()[0].GetLimitRemaining() != 6 || stored(t, c, lim, "t1", "export") != 6 {
			t.Fatalf("hits_addend 4 of 10: %v", res)
		}
		d := desc("tenant", "t1", "class", "export")
		d.HitsAddend = wrapperspb.UInt64(5) // overrides the request's 4
		res = ask(t, client, request(4, d))
		if res.GetStatuses()[0].GetLimitRemaining() != 1 || stored(t, c, lim, "t1", "export") != 1 {
			t.Fatalf("descriptor hits_addend 5 of 6: %v", res)
		}
		d.HitsAddend = wrapperspb.UInt64(0) // a check: nothing charged
		res = ask(t, client, request(4, d))
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetLimitRemaining() != 1 || stored(t, c, lim, "t1", "export") != 1 {
			t.Fatalf("descriptor hits_addend 0 is a check: %v", res)
		}
		res = ask(t, client, request(0, desc("tenant", "t1", "class", "export")))
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || stored(t, c, lim, "t1", "export") != 0 {
			t.Fatalf("request hits_addend 0 is 1: %v", res)
		}
		d.HitsAddend = wrapperspb.UInt64(2)
		clock.Advance(2 * time.Second) // export refills 0.5/s: 1 token
		d.HitsAddend = wrapperspb.UInt64(3)
		if res = ask(t, client, request(0, d)); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || res.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("3 of 1 left: %v; want OVER_LIMIT with limit_remaining 0, as the reference", res)
		}
	})
}

// A gateway check and a service check (httplimit) of one tenant and class
// drain one bucket.
func TestGatewayAndServiceShareABucket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim)
		svc := httplimit.Middleware(testkit.NewUnitGate(t, lim))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))

		ask(t, client, request(0, desc("tenant", "t7")))
		rec := serveHTTP(svc, "t7")
		if rec.Code != 200 || rec.Header().Get("X-Ratelimit-Remaining") != "1" {
			t.Fatalf("service after the gateway: %d %v", rec.Code, rec.Header())
		}
		if got := stored(t, c, lim, "t7", "default"); got != 1 {
			t.Fatalf("bucket rl:{t7}:default = %v after one check each, want 1", got)
		}
		res := ask(t, client, request(0, desc("tenant", "t7")))
		if res.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("gateway after the service: %v", res)
		}
		if rec := serveHTTP(svc, "t7"); rec.Code != 429 {
			t.Fatalf("service with the bucket empty: %d, want 429", rec.Code)
		}
		if res := ask(t, client, request(0, desc("tenant", "t7"))); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("gateway with the bucket empty: %v", res)
		}
	})
}

func serveHTTP(h http.Handler, tenant string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/v1/profile", nil)
	r = r.WithContext(gate.ContextWithTenant(r.Context(), quota.Tenant{ID: tenant}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// The headers are byte for byte those the HTTP adapter sends for the same
// decision, in every style, admitted and denied.
func TestHeadersMatchHTTPAdapter(t *testing.T) {
	c := redistest.Client(t)
	styles := map[string]render.HeaderStyle{
		"default": render.DefaultHeaderStyle,
		"epoch":   render.HeaderIETF | render.HeaderXRateLimitEpoch,
		"draft06": render.HeaderDraft06,
		"none":    render.HeaderNone,
	}
	for name, style := range styles {
		t.Run(name, func(t *testing.T) {
			clock := testkit.NewFakeClock()
			clock.Advance(1234567 * time.Microsecond) // fractional seconds
			lim := newLimiter(t, c, core.WithClock(clock.Now))
			client := serve(t, lim, rls.WithHeaderStyle(style))
			svc := httplimit.Middleware(testkit.NewUnitGate(t, lim, gate.WithHeaderStyle(style)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i := range 5 {
				if i == 4 {
					clock.Advance(700 * time.Millisecond)
				}
				res := ask(t, client, request(0, desc("tenant", "gw")))
				rec := serveHTTP(svc, "svc")
				var got, want []string
				for _, h := range res.GetResponseHeadersToAdd() {
					got = append(got, h.GetKey()+": "+h.GetValue())
				}
				for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
					"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After", "Content-Type"} {
					for _, v := range rec.Header().Values(h) {
						want = append(want, h+": "+v)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("request %d (HTTP %d):\n gateway %q\n    http %q", i+1, rec.Code, got, want)
				}
				if rec.Code == 429 && string(res.GetRawBody()) != rec.Body.String() {
					t.Errorf("request %d: raw_body %s, HTTP body %s", i+1, res.GetRawBody(), rec.Body)
				}
			}
		})
	}
}

// Descriptors that cannot be checked get an answer of their own; nothing in
// the request is charged.
func TestInvalidDescriptors(t *testing.T) {
	c := redistest.Client(t)
	lim := newLimiter(t, c)
	client := serve(t, lim, rls.WithMaxCost(50), rls.WithTrustedTier(true))
	big := desc("tenant", "t1")
	big.HitsAddend = wrapperspb.UInt64(51)
	cases := []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{desc("tenant", "ok"), ""},
		{desc("user", "t1"), "no tenant entry"},
		{desc("tenant", ""), "tenant ID"},
		{desc("tenant", strings.Repeat("x", 300)), "tenant ID"},
		{desc("tenant", "t1", "class", "no such/class"), "bucket name"},
		{desc("tenant", "t1", "tenant", "t2"), `"tenant" given twice`},
		{big, "hits_addend must be 0 to 50, got 51"},
	}
	req := request(0)
	for _, tc := range cases {
		req.Descriptors = append(req.Descriptors, tc.d)
	}
	res := ask(t, client, req)
	if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(res.GetStatuses()) != len(cases) {
		t.Fatalf("overall %v with %d statuses", res.GetOverallCode(), len(res.GetStatuses()))
	}
	for i, tc := range cases {
		st := res.GetStatuses()[i]
		if tc.want == "" {
			if st.GetCode() != rlsv3.RateLimitResponse_UNKNOWN {
				t.Errorf("valid descriptor %d: %v, want UNKNOWN (not decided)", i, st)
			}
			continue
		}
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(st.GetCurrentLimit().GetName(), tc.want) {
			t.Errorf("descriptor %d: %v, want OVER_LIMIT naming %q", i, st, tc.want)
		}
	}
	ctx := context.Background()
	if keys, err := c.Keys(ctx, lim.Keys().Prefix()+":*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("an invalid request wrote %v (%v)", keys, err)
	}

	// an unknown tier: no quota, so denied, never unlimited
	res = ask(t, client, request(0, desc("tenant", "t1", "tier", "platinum")))
	if st := res.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(st.GetCurrentLimit().GetName(), "no quota configured") {
		t.Errorf("unknown tier: %v", res)
	}
	// no descriptor at all is a malformed call
	if _, err := client.ShouldRateLimit(ctx, request(0)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v, want InvalidArgument", err)
	}
	many := request(0)
	for range rls.MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("tenant", "t1"))
	}
	if res := ask(t, client, many); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(res.GetStatuses()[0].GetCurrentLimit().GetName(), "descriptors in one request") {
		t.Errorf("%d descriptors: %v", len(many.Descriptors), res.GetStatuses()[0])
	}
}

// Several descriptors of one tenant are all-or-nothing; another tenant's
// are its own.
func TestDescriptorsOfOneTenantAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock()
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim, rls.WithTrustedTier(true))
		both := request(3, desc("tenant", "t1"), desc("tenant", "t1", "class", "export"), desc("tenant", "t2"))
		res := ask(t, client, both)
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("first: %v", res)
		}
		if r := res.GetStatuses(); r[0].GetLimitRemaining() != 0 || r[1].GetLimitRemaining() != 7 || r[2].GetLimitRemaining() != 0 {
			t.Fatalf("remaining = %d %d %d, want 0 7 0", r[0].GetLimitRemaining(), r[1].GetLimitRemaining(), r[2].GetLimitRemaining())
		}
		clock.Advance(2 * time.Second) // default 2, export 8
		res = ask(t, client, both)
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("second: %v", res)
		}
		if r := res.GetStatuses(); r[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || r[1].GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("codes = %v %v, want OVER_LIMIT OK", r[0].GetCode(), r[1].GetCode())
		}
		if got := stored(t, c, lim, "t1", "export"); got != 7 {
			t.Errorf("export = %v after its sibling's denial, want 7 (not charged)", got)
		}
		// a ceiling binds every class of its tenant
		pro := request(4, desc("tenant", "p1", "tier", "pro", "class", "export"), desc("tenant", "p1", "tier", "pro"))
		res = ask(t, client, pro)
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || stored(t, c, lim, "p1", quota.CeilingBucket) != 2 {
			t.Fatalf("pro: %v", res)
		}
		if st := res.GetStatuses()[1]; st.GetCurrentLimit().GetName() != "default" || st.GetLimitRemaining() != 1 {
			t.Errorf("pro default: %v, want default's 1 left", st)
		}
		res = ask(t, client, pro)
		for i, st := range res.GetStatuses() {
			if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCurrentLimit().GetName() != quota.CeilingBucket {
				t.Errorf("pro %d after the ceiling ran out: %v, want OVER_LIMIT by the ceiling", i, st)
			}
		}
	})
}

// The tier entry is the tenant's tier only where trusted; with the tier
// file named, a tier or class it does not define is answered invalid
// before any check, so descriptor values never become metric labels.
func TestTierEntryTrustedOnlyWhenToldAndNamesBounded(t *testing.T) {
	c := redistest.Client(t)
	lim := newLimiter(t, c)
	untrusted := serve(t, lim)
	// free's default is 3 burst; pro's 5 (and a ceiling of 6)
	if st := ask(t, untrusted, request(0, desc("tenant", "u1", "tier", "pro"))).GetStatuses()[0]; st.GetLimitRemaining() != 2 {
		t.Fatalf("an untrusted tier entry naming pro: %v; want free's 2 left", st)
	}
	trusted := serve(t, lim, rls.WithTrustedTier(true))
	if st := ask(t, trusted, request(0, desc("tenant", "u2", "tier", "pro"))).GetStatuses()[0]; st.GetLimitRemaining() != 4 {
		t.Fatalf("a trusted tier entry naming pro: %v; want pro's 4 left", st)
	}
	res, err := quota.NewResolver(testTiers())
	if err != nil {
		t.Fatal(err)
	}
	bounded := serve(t, lim, rls.WithTrustedTier(true), rls.WithTiers(res))
	for _, tc := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{desc("tenant", "u3", "tier", "junk-1"), "unknown tier"},
		{desc("tenant", "u3", "class", "junk-2"), "unknown class"},
	} {
		st := ask(t, bounded, request(0, tc.d)).GetStatuses()[0]
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(st.GetCurrentLimit().GetName(), tc.want) {
			t.Errorf("%v: %v, want OVER_LIMIT naming %q", tc.d, st, tc.want)
		}
	}
	if st := ask(t, bounded, request(0, desc("tenant", "u3", "class", "export"))).GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("a defined class: %v", st)
	}
	if _, err := rls.New(lim, rls.WithTrustedTier(true), rls.WithRules(mustRules(t))); err == nil {
		t.Error("WithTrustedTier with WithRules was accepted")
	}
}

func mustRules(t *testing.T) *rls.Rules {
	t.Helper()
	cfg, err := rls.ParseConfig("x.yaml", []byte("domain: d\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rls.NewRules(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With rls.WithLimitHeaders the answer carries the reference's three
// headers, read from the status the reference would choose (the least
// remaining, the last one over its limit), and no body; on the tenant
// mapping as on the rules.
func TestLimitHeaders(t *testing.T) {
	clock := testkit.NewFakeClock()
	lim := newLimiter(t, redistest.Client(t), core.WithClock(clock.Now))
	client := serve(t, lim, rls.WithLimitHeaders("", "X-Left", ""))
	req := request(0, desc("tenant", "gw", "class", "export"), desc("tenant", "gw"))
	var got []string
	for i := range 4 { // default: 3 burst, 1/s; export: 10, 0.5/s
		res := ask(t, client, req)
		got = got[:0]
		for _, h := range res.GetResponseHeadersToAdd() {
			got = append(got, h.GetKey()+": "+h.GetValue())
		}
		if len(res.GetRawBody()) != 0 {
			t.Errorf("raw_body %q, want none", res.GetRawBody())
		}
		// after the first: default has 2 left (1/s: 1 per SECOND, full in 1 s), export 9
		if want := []string{"RateLimit-Limit: 1", "X-Left: 2", "RateLimit-Reset: 1"}; i == 0 && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("first request: %q, want %q", got, want)
		}
	}
	// the fourth is denied by default: its status speaks, 0 left, full in 3 s
	if want := []string{"RateLimit-Limit: 1", "X-Left: 0", "RateLimit-Reset: 3"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("denied request: %q, want %q", got, want)
	}
}
