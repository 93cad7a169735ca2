package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// shapes: every scenario runs as a unary call (GetProfile) and as a server
// stream (ExportReport, charged when it opens), both routed to the same
// class and cost.
var shapes = []struct {
	name string
	call caller
}{
	{"unary", getProfile},
	{"stream", export},
}

// caller makes one call of a shape and returns what came back.
type caller = func(context.Context, testpb.TestServiceClient) result

func forEachShape(t *testing.T, f func(t *testing.T, call caller)) {
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) { f(t, s.call) })
	}
}

// forEachBackendShape runs f on every backend, in every shape.
func forEachBackendShape(t *testing.T, f func(t *testing.T, c redis.UniversalClient, call caller)) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		forEachShape(t, func(t *testing.T, call caller) { f(t, c, call) })
	})
}

// denial holds the decoded details of a denied call, each counted.
type denial struct {
	info  []*errdetails.ErrorInfo
	retry []*errdetails.RetryInfo
	quota []*errdetails.QuotaFailure
	other []any
}

func decode(t *testing.T, st *status.Status) denial {
	t.Helper()
	var d denial
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.ErrorInfo:
			d.info = append(d.info, x)
		case *errdetails.RetryInfo:
			d.retry = append(d.retry, x)
		case *errdetails.QuotaFailure:
			d.quota = append(d.quota, x)
		default:
			d.other = append(d.other, x)
		}
	}
	return d
}

// wantDenied checks a denial's code, details and trailers, and that it was
// Trailers-Only (no header metadata reached the client).
func wantDenied(t *testing.T, r result, code codes.Code, subject string, meta map[string]string, retry time.Duration, trailers map[string]string) {
	t.Helper()
	if r.st.Code() != code {
		t.Fatalf("code %v (%v), want %v", r.st.Code(), r.err, code)
	}
	if r.header != nil {
		t.Fatalf("header metadata %v on a denial: the response must be Trailers-Only", r.header)
	}
	d := decode(t, r.st)
	wantRetry := 1
	if retry < 0 {
		wantRetry = 0
	}
	if len(d.info) != 1 || len(d.retry) != wantRetry || len(d.quota) != 1 || len(d.other) != 0 {
		t.Fatalf("details: %d ErrorInfo, %d RetryInfo, %d QuotaFailure, %d other; want 1, %d, 1, 0", len(d.info), len(d.retry), len(d.quota), len(d.other), wantRetry)
	}
	want := &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "tollgate.dev", Metadata: meta}
	if !proto.Equal(d.info[0], want) {
		t.Fatalf("ErrorInfo %v, want %v", d.info[0], want)
	}
	if retry >= 0 && d.retry[0].GetRetryDelay().AsDuration() != retry {
		t.Fatalf("RetryInfo delay %v, want exactly %v", d.retry[0].GetRetryDelay().AsDuration(), retry)
	}
	vs := d.quota[0].GetViolations()
	if len(vs) != 1 || vs[0].GetSubject() != subject || vs[0].GetDescription() == "" || vs[0].GetDescription() != r.st.Message() {
		t.Fatalf("QuotaFailure violations %v, want one for %s described as %q", vs, subject, r.st.Message())
	}
	wantMD(t, "trailer", r.trailer, trailers)
}

// wantMD checks the rate-limit keys of md: exactly those of want ("" =
// absent).
func wantMD(t *testing.T, what string, md metadata.MD, want map[string]string) {
	t.Helper()
	for _, k := range []string{"ratelimit", "ratelimit-policy", "retry-after", "grpc-retry-pushback-ms", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
		got := md.Get(k)
		w, ok := want[k]
		if !ok {
			continue
		}
		if w == "" && len(got) != 0 {
			t.Fatalf("%s %s = %q, want none", what, k, got)
		}
		if w != "" && (len(got) != 1 || got[0] != w) {
			t.Fatalf("%s %s = %q, want %q", what, k, got, w)
		}
	}
}

func TestBurstDenyRefill(t *testing.T) {
	forEachBackendShape(t, func(t *testing.T, c redis.UniversalClient, call caller) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now))))
		cl := e.client(t)
		ctx := as("t1", "free")
		for i, want := range []string{`"default";r=2;t=1`, `"default";r=1;t=1`, `"default";r=0;t=1`} {
			r := call(ctx, cl)
			if r.err != nil {
				t.Fatalf("call %d: %v", i+1, r.err)
			}
			wantMD(t, "header", r.header, map[string]string{"ratelimit": want, "ratelimit-policy": `"default";q=3;w=3`,
				"x-ratelimit-limit": "3", "x-ratelimit-remaining": itoa(int64(2 - i)), "retry-after": "", "grpc-retry-pushback-ms": ""})
		}
		meta := map[string]string{"policy": "default", "limit": "3", "remaining": "0", "cost": "1", "reason": "over_limit"}
		wantDenied(t, call(ctx, cl), codes.ResourceExhausted, "tenant:t1", meta, time.Second, map[string]string{
			"ratelimit": `"default";r=0;t=1`, "ratelimit-policy": `"default";q=3;w=3`, "retry-after": "1", "grpc-retry-pushback-ms": "1000"})
		clock.Advance(250 * time.Millisecond)
		wantDenied(t, call(ctx, cl), codes.ResourceExhausted, "tenant:t1", meta, 750*time.Millisecond, map[string]string{
			"retry-after": "1", "grpc-retry-pushback-ms": "750"})
		if n := e.svc.calls.Load(); n != 3 {
			t.Fatalf("handler ran %d times, want 3: a denial reached it", n)
		}
		clock.Advance(750 * time.Millisecond) // refilled one token
		if r := call(ctx, cl); r.err != nil || first(r.header, "x-ratelimit-remaining") != "0" {
			t.Fatalf("after the refill: %v, header %v", r.err, r.header)
		}
		if r := call(as("t2", "free"), cl); r.err != nil { // other tenants have their own buckets
			t.Fatalf("other tenant: %v", r.err)
		}
		if n := e.svc.calls.Load(); n != 5 {
			t.Fatalf("handler ran %d times, want 5", n)
		}
	})
}

func TestCostExceedsCapacity(t *testing.T) {
	forEachBackendShape(t, func(t *testing.T, c redis.UniversalClient, call caller) {
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c), gate.WithRoutes(gate.Routes{
			mProfile: {Class: "tiny", Cost: 5}, mExport: {Class: "tiny", Cost: 5}, mItem: {Class: "tiny", Cost: 1}})))
		cl := e.client(t)
		ctx := as("t1", "")
		meta := map[string]string{"policy": "tiny", "limit": "2", "remaining": "2", "cost": "5", "reason": "cost_exceeds_capacity"}
		wantDenied(t, call(ctx, cl), codes.ResourceExhausted, "tenant:t1", meta, -1, map[string]string{
			"ratelimit-policy": `"tiny";q=2;w=2`, "retry-after": "", "grpc-retry-pushback-ms": "-1"})
		if n := e.svc.calls.Load(); n != 0 {
			t.Fatalf("handler ran %d times", n)
		}
		// nothing was charged
		var h metadata.MD
		if _, err := cl.GetItem(ctx, &testpb.GetItemRequest{Id: "a"}, grpc.Header(&h)); err != nil || first(h, "x-ratelimit-remaining") != "1" {
			t.Fatalf("GetItem after the never-denial: %v, %v", err, h)
		}
	})
}

func TestMultiBucket(t *testing.T) {
	forEachBackendShape(t, func(t *testing.T, c redis.UniversalClient, call caller) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now))))
		cl := e.client(t)
		ctx := as("big", "ceiling")
		for range 2 {
			if r := call(ctx, cl); r.err != nil {
				t.Fatal(r.err)
			}
		}
		r := call(ctx, cl)
		meta := map[string]string{"policy": quota.CeilingBucket, "limit": "2", "remaining": "0", "cost": "1", "reason": "over_limit"}
		wantDenied(t, r, codes.ResourceExhausted, "tenant:big", meta, time.Second, map[string]string{"grpc-retry-pushback-ms": "1000"})
		if n := e.svc.calls.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
	})
}

func TestShadow(t *testing.T) {
	forEachBackendShape(t, func(t *testing.T, c redis.UniversalClient, call caller) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now), core.WithShadow(true))))
		cl := e.client(t)
		for i := range 5 {
			r := call(as("t1", ""), cl)
			if r.err != nil {
				t.Fatalf("call %d in shadow mode: %v", i+1, r.err)
			}
			if i >= 3 {
				wantMD(t, "header", r.header, map[string]string{"ratelimit": `"default";r=0;t=1`, "retry-after": "", "grpc-retry-pushback-ms": ""})
			}
		}
		if n := e.svc.calls.Load(); n != 5 {
			t.Fatalf("handler ran %d times, want 5", n)
		}
	})
}

func TestStoreFailure(t *testing.T) {
	forEachShape(t, func(t *testing.T, call caller) {
		t.Run("fail open", func(t *testing.T) {
			var errs atomic.Int64
			e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, deadRedis(t), core.WithTimeout(300*time.Millisecond))), grpclimit.WithErrorHandler(func(_ context.Context, m string, err error) {
				if errors.Is(err, core.ErrStore) && strings.HasPrefix(m, "/tollgate.test.v1.TestService/") {
					errs.Add(1)
				}
			}))
			r := call(as("t1", ""), e.client(t))
			if r.err != nil {
				t.Fatalf("fail-open: %v", r.err)
			}
			wantMD(t, "header", r.header, map[string]string{"ratelimit": "", "ratelimit-policy": "", "x-ratelimit-limit": ""})
			if e.svc.calls.Load() != 1 || errs.Load() != 1 {
				t.Fatalf("handler %d, error hook %d; want 1, 1", e.svc.calls.Load(), errs.Load())
			}
		})
		t.Run("fail closed", func(t *testing.T) {
			e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, deadRedis(t), core.WithTimeout(300*time.Millisecond), core.WithFailurePolicy(core.FailClosed))))
			r := call(as("t1", ""), e.client(t))
			if r.st.Code() != codes.Unavailable || len(r.st.Details()) != 0 {
				t.Fatalf("fail-closed: %v with %d details, want Unavailable without", r.err, len(r.st.Details()))
			}
			wantMD(t, "trailer", r.trailer, map[string]string{"ratelimit": "", "grpc-retry-pushback-ms": "", "retry-after": ""})
			if e.svc.calls.Load() != 0 {
				t.Fatal("handler ran under fail-closed")
			}
		})
	})
}

func TestNoTenant(t *testing.T) {
	forEachShape(t, func(t *testing.T, call caller) {
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, redistest.Client(t))))
		// a tenant in metadata the client sets is no identity
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "t1", "tenant", "t1")
		r := call(ctx, e.client(t))
		if r.st.Code() != codes.Unauthenticated || r.header != nil {
			t.Fatalf("no tenant: %v (header %v), want Unauthenticated, Trailers-Only", r.err, r.header)
		}
		if e.svc.calls.Load() != 0 {
			t.Fatal("handler ran without a tenant")
		}
	})
}

func TestAnonymous(t *testing.T) {
	e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, redistest.Client(t)), gate.WithAnonymous("")))
	a := testpb.NewTestServiceClient(e.dial(t, "203.0.113.7"))
	b := testpb.NewTestServiceClient(e.dial(t, "203.0.113.8"))
	if r := getProfile(context.Background(), a); r.err != nil {
		t.Fatal(r.err)
	}
	r := getProfile(context.Background(), a) // tier anonymous: 1 token
	meta := map[string]string{"policy": "default", "limit": "1", "remaining": "0", "cost": "1", "reason": "over_limit"}
	if r.st.Code() != codes.ResourceExhausted {
		t.Fatalf("second anonymous call: %v", r.err)
	}
	wantDenied(t, r, codes.ResourceExhausted, "tenant:anonymous%3A203.0.113.7", meta, decode(t, r.st).retry[0].GetRetryDelay().AsDuration(), nil)
	if r := getProfile(context.Background(), b); r.err != nil { // another peer, another key
		t.Fatalf("other peer: %v", r.err)
	}
}

func TestOptions(t *testing.T) {
	c := redistest.Client(t)
	t.Run("denied code Unavailable", func(t *testing.T) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now))), grpclimit.WithDeniedCode(codes.Unavailable), grpclimit.WithDomain("api.example.com"))
		cl := e.client(t)
		for range 3 {
			getProfile(as("t1", ""), cl)
		}
		r := getProfile(as("t1", ""), cl)
		if r.st.Code() != codes.Unavailable || decode(t, r.st).info[0].GetDomain() != "api.example.com" || first(r.trailer, "grpc-retry-pushback-ms") != "1000" {
			t.Fatalf("%v %v", r.err, r.trailer)
		}
	})
	t.Run("filter and exempt methods skip the limiter", func(t *testing.T) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now)), gate.WithRoutes(gate.Routes{mExport: {Exempt: true}})), grpclimit.WithFilter(func(_ context.Context, m string) bool { return m != mItem }))
		cl := e.client(t)
		for range 10 {
			var h metadata.MD
			if _, err := cl.GetItem(as("t1", ""), &testpb.GetItemRequest{}, grpc.Header(&h)); err != nil || h.Get("ratelimit") != nil {
				t.Fatalf("filtered method: %v %v", err, h)
			}
			if r := export(as("t1", ""), cl); r.err != nil || r.header.Get("ratelimit") != nil {
				t.Fatalf("exempt method: %v %v", r.err, r.header)
			}
		}
		if r := getProfile(as("t1", ""), cl); first(r.header, "x-ratelimit-remaining") != "2" {
			t.Fatalf("limited method: %v %v", r.err, r.header)
		}
	})
	t.Run("cost func and header style", func(t *testing.T) {
		clock := testkit.NewFakeClock()
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c, core.WithClock(clock.Now)), gate.WithCostFunc(func(_ context.Context, _ quota.Tenant, ep gate.Endpoint) (gate.Route, bool) {
			return gate.Route{Class: "export", Cost: 4}, ep.Pattern == mProfile && ep.Method == ""
		}), gate.WithHeaderStyle(render.HeaderIETF)))
		r := getProfile(as("t1", ""), e.client(t))
		if r.err != nil || first(r.header, "ratelimit") != `"export";r=6;t=2` || r.header.Get("x-ratelimit-limit") != nil {
			t.Fatalf("%v %v", r.err, r.header)
		}
	})
	t.Run("a cost func answering cost 0 is Internal, not a free pass", func(t *testing.T) {
		e, hooked := costFuncEnv(t, c, gate.Route{Class: "default", Cost: 0})
		r := getProfile(as("zero", ""), e.client(t))
		if status.Code(r.err) != codes.Internal || !strings.Contains(r.err.Error(), "misconfigured") || e.svc.calls.Load() != 0 {
			t.Fatalf("%v, handler calls %d", r.err, e.svc.calls.Load())
		}
		if err := hooked(); !errors.Is(err, core.ErrInvalidConfig) {
			t.Fatalf("hook: %v", err)
		}
	})
	t.Run("a cost function's bad route is Internal with a fixed message, the cause only for the hook", func(t *testing.T) {
		// a cost function's bad route: the same answer, served
		e, hooked := costFuncEnv(t, c, gate.Route{Class: "x y", Cost: 1})
		r := getProfile(as("bad-route", ""), e.client(t))
		if r.st.Code() != codes.Internal || r.st.Message() != "The rate limiter is misconfigured." || strings.Contains(r.st.Message(), "x y") {
			t.Fatalf("bad route: %v", r.err)
		}
		if err := hooked(); !errors.Is(err, core.ErrInvalidConfig) {
			t.Fatalf("hook: %v", err)
		}
	})
	t.Run("nil options are skipped", func(t *testing.T) {
		e := newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c)), nil, nil)
		if r := getProfile(as("nil-options", ""), e.client(t)); r.err != nil || first(r.header, "x-ratelimit-remaining") == "" {
			t.Fatalf("%v %v", r.err, r.header)
		}
	})
}

// costFuncEnv serves a gate whose cost function answers route for every
// call; hooked returns the first error the error handler got, or nil if
// it got none within 10 s.
func costFuncEnv(t *testing.T, c redis.UniversalClient, route gate.Route) (e *env, hooked func() error) {
	t.Helper()
	first := make(chan error, 1)
	e = newEnv(t, testkit.NewUnitGate(t, newLimiter(t, c), gate.WithCostFunc(func(context.Context, quota.Tenant, gate.Endpoint) (gate.Route, bool) {
		return route, true
	})), grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) {
		select {
		case first <- err:
		default:
		}
	}))
	return e, func() error {
		select {
		case err := <-first:
			return err
		case <-time.After(10 * time.Second):
			return nil
		}
	}
}
