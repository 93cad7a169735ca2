package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/connectlimit"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// testTiers: tier "free" has class default (3 tokens, 1/s), class upload
// (2, 1/s) and class fast (1, 5/s: a denial waits 200 ms).
func testTiers() quota.Tiers {
	return quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 3, RefillPerSecond: 1},
			"upload":  {Capacity: 2, RefillPerSecond: 1},
			"fast":    {Capacity: 1, RefillPerSecond: 5},
		}},
	}}
}

// testGate is a gate on testTiers over c: GetItem costs 5 (more than the
// default class holds), Upload is class upload, Export class fast.
func testGate(t testing.TB, c redis.UniversalClient, opts ...core.Option) *gate.Gate {
	t.Helper()
	lim := newLimiter(t, c, opts...)
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		pItem:   {Class: "default", Cost: 5},
		pUpload: {Class: "upload", Cost: 1},
		pExport: {Class: "fast", Cost: 1},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// deadRedis is a client of a port nothing listens on: every check fails
// as a store failure.
func deadRedis(t testing.TB) redis.UniversalClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// caller calls the test service as tenant acme (none when tenant is "")
// over one protocol.
type caller struct {
	t        *testing.T
	url      string
	hc       *http.Client
	protocol []connect.ClientOption
	tenant   string
	more     []connect.ClientOption
}

func newCaller(t *testing.T, url, protocol string, more ...connect.ClientOption) *caller {
	return &caller{t: t, url: url, hc: httpClient(t), protocol: protocols[protocol], tenant: "acme", more: more}
}

func (c *caller) opts() []connect.ClientOption {
	return append(append([]connect.ClientOption(nil), c.protocol...), c.more...)
}

func (c *caller) header(h http.Header) {
	if c.tenant != "" {
		h.Set("Authorization", conformance.Request{Tenant: c.tenant, Tier: "free"}.Authorization())
	}
}

// unary calls procedure; meta is the response headers and trailers, or
// the error's metadata.
func (c *caller) unary(procedure string) (meta http.Header, err error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	var res connect.AnyResponse
	if procedure == pItem {
		r := connect.NewRequest(wrapperspb.String("x"))
		c.header(r.Header())
		res, err = connect.NewClient[wrapperspb.StringValue, emptypb.Empty](c.hc, c.url+procedure, c.opts()...).CallUnary(ctx, r)
	} else {
		r := connect.NewRequest(&emptypb.Empty{})
		c.header(r.Header())
		res, err = connect.NewClient[emptypb.Empty, emptypb.Empty](c.hc, c.url+procedure, c.opts()...).CallUnary(ctx, r)
	}
	meta = http.Header{}
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		addAll(meta, ce.Meta())
	case err == nil:
		addAll(meta, res.Header(), res.Trailer())
	}
	return meta, err
}

// details are err's error details, decoded.
func details(t *testing.T, err error) (ei *errdetails.ErrorInfo, ri *errdetails.RetryInfo, qf *errdetails.QuotaFailure) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%v: not a *connect.Error", err)
	}
	for _, d := range ce.Details() {
		m, err := d.Value()
		if err != nil {
			t.Fatalf("detail %s: %v", d.Type(), err)
		}
		switch m := m.(type) {
		case *errdetails.ErrorInfo:
			ei = m
		case *errdetails.RetryInfo:
			ri = m
		case *errdetails.QuotaFailure:
			qf = m
		}
	}
	return ei, ri, qf
}

var allProtocols = []string{"connect", "grpc", "grpcweb"}

// A denial is CodeResourceExhausted with ErrorInfo, RetryInfo and
// QuotaFailure, the rate-limit metadata and the pushback, on every
// protocol; the handler is not called.
func TestDenial(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)))))
			c := newCaller(t, url, proto)
			for i := range 3 {
				meta, err := c.unary(pProfile)
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if got := meta.Get("X-Ratelimit-Limit"); got != "3" {
					t.Errorf("call %d: X-RateLimit-Limit %q, want 3", i+1, got)
				}
			}
			meta, err := c.unary(pProfile)
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("4th call: %v, want CodeResourceExhausted", err)
			}
			if n := svc.calls.Load(); n != 3 {
				t.Errorf("handler calls %d, want 3", n)
			}
			ei, ri, qf := details(t, err)
			if ei.GetReason() != "RATE_LIMIT_EXCEEDED" || ei.GetDomain() != "tollgate.dev" || ei.GetMetadata()["reason"] != "over_limit" ||
				ei.GetMetadata()["limit"] != "3" || ei.GetMetadata()["remaining"] != "0" || ei.GetMetadata()["cost"] != "1" || ei.GetMetadata()["policy"] != "default" {
				t.Errorf("ErrorInfo %v", ei)
			}
			if d := ri.GetRetryDelay().AsDuration(); d <= 0 || d > time.Second {
				t.Errorf("RetryInfo %v, want (0, 1 s]", ri)
			}
			if v := qf.GetViolations(); len(v) != 1 || v[0].GetSubject() != "tenant:acme" {
				t.Errorf("QuotaFailure %v", qf)
			}
			if meta.Get("Retry-After") != "1" || meta.Get("X-Ratelimit-Remaining") != "0" || !strings.HasPrefix(meta.Get("Ratelimit"), `"default";r=0;t=`) {
				t.Errorf("metadata %v", meta)
			}
			if got := meta.Values("Grpc-Retry-Pushback-Ms"); len(got) != 1 || got[0] == "-1" || got[0] == "0" {
				t.Errorf("Grpc-Retry-Pushback-Ms %q", got)
			}
		})
	}
}

// A cost above capacity can never be met: no RetryInfo, no Retry-After,
// pushback -1; the retrying client does not retry it.
func TestCostExceedsCapacity(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)))))
			var waits []time.Duration
			c := newCaller(t, url, proto, connect.WithInterceptors(connectlimit.NewClientInterceptor(retry.WithSleep(func(_ context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			}))))
			meta, err := c.unary(pItem)
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("GetItem: %v, want CodeResourceExhausted", err)
			}
			ei, ri, _ := details(t, err)
			if ei.GetMetadata()["reason"] != "cost_exceeds_capacity" || ri != nil {
				t.Errorf("ErrorInfo %v, RetryInfo %v: want cost_exceeds_capacity and no RetryInfo", ei, ri)
			}
			if meta.Get("Retry-After") != "" || meta.Get("Grpc-Retry-Pushback-Ms") != "-1" {
				t.Errorf("Retry-After %q, pushback %q: want none and -1", meta.Get("Retry-After"), meta.Get("Grpc-Retry-Pushback-Ms"))
			}
			if len(waits) != 0 || svc.calls.Load() != 0 {
				t.Errorf("waits %v, handler calls %d: want a never answer returned at once", waits, svc.calls.Load())
			}
		})
	}
}

// A store failure under fail-closed is CodeUnavailable without details,
// reported to the error handler; fail-open runs the handler.
func TestStoreFailure(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			var mu sync.Mutex
			var errs []error
			hook := connectlimit.WithErrorHandler(func(_ context.Context, p string, err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
			closed := &service{}
			url := server(t, closed.mux(false, connectlimit.NewInterceptor(testGate(t, deadRedis(t), core.WithFailurePolicy(core.FailClosed)), hook)))
			_, err := newCaller(t, url, proto).unary(pProfile)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || len(ce.Details()) != 0 || closed.calls.Load() != 0 {
				t.Errorf("fail-closed: %v, want CodeUnavailable without details and no handler call", err)
			}
			open := &service{}
			url = server(t, open.mux(false, connectlimit.NewInterceptor(testGate(t, deadRedis(t), core.WithFailurePolicy(core.FailOpen)), hook)))
			if _, err := newCaller(t, url, proto).unary(pProfile); err != nil || open.calls.Load() != 1 {
				t.Errorf("fail-open: %v, handler calls %d", err, open.calls.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 2 {
				t.Errorf("error handler got %v, want the two store failures", errs)
			}
		})
	}
}

// No tenant in the context is CodeUnauthenticated, before the handler.
func TestUnauthenticated(t *testing.T) {
	svc := &service{}
	url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)))))
	c := newCaller(t, url, "grpc")
	c.tenant = ""
	if _, err := c.unary(pProfile); connect.CodeOf(err) != connect.CodeUnauthenticated || svc.calls.Load() != 0 {
		t.Errorf("no tenant: %v, handler calls %d", err, svc.calls.Load())
	}
}

// A filtered procedure is neither charged nor given headers.
func TestFilter(t *testing.T) {
	svc := &service{}
	g := testGate(t, redisClient(t))
	url := server(t, svc.mux(false, connectlimit.NewInterceptor(g, connectlimit.WithFilter(func(_ context.Context, p string) bool { return p != pProfile }))))
	c := newCaller(t, url, "connect")
	for i := range 5 {
		meta, err := c.unary(pProfile)
		if err != nil || meta.Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("filtered call %d: %v, headers %v", i+1, err, meta)
		}
	}
}

// A server stream is charged when it opens; its denial reaches the client
// before any message.
func TestServerStream(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)))))
			c := newCaller(t, url, proto)
			export := func() (int, http.Header, error) {
				req := connect.NewRequest(&emptypb.Empty{})
				c.header(req.Header())
				st, err := connect.NewClient[emptypb.Empty, wrapperspb.Int64Value](c.hc, url+pExport, c.opts()...).CallServerStream(t.Context(), req)
				if err != nil {
					return 0, nil, err
				}
				defer st.Close()
				n := 0
				for st.Receive() {
					n++
				}
				return n, st.ResponseHeader(), st.Err()
			}
			n, h, err := export()
			if err != nil || n != 3 || h.Get("X-Ratelimit-Limit") != "1" {
				t.Fatalf("first export: %d messages, headers %v, %v", n, h, err)
			}
			n, _, err = export()
			if connect.CodeOf(err) != connect.CodeResourceExhausted || n != 0 {
				t.Fatalf("second export: %d messages, %v; want CodeResourceExhausted before any", n, err)
			}
			if _, ri, _ := details(t, err); ri == nil {
				t.Error("second export: no RetryInfo")
			}
		})
	}
}

// WithMessageCost charges each message of a client stream: past the
// upload class's 2 tokens (the stream's own charge took one), Receive
// returns the denial.
func TestMessageCost(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)), connectlimit.WithMessageCost("upload", 1))))
			c := newCaller(t, url, proto)
			st := connect.NewClient[wrapperspb.Int64Value, wrapperspb.Int64Value](c.hc, url+pUpload, c.opts()...).CallClientStream(t.Context())
			c.header(st.RequestHeader())
			for i := range 5 {
				if err := st.Send(wrapperspb.Int64(int64(i))); err != nil {
					if errors.Is(err, io.EOF) {
						break // the server answered; CloseAndReceive says how
					}
					t.Fatal(err)
				}
			}
			_, err := st.CloseAndReceive()
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("upload: %v, want CodeResourceExhausted", err)
			}
			if _, ri, _ := details(t, err); ri == nil {
				t.Error("upload denial: no RetryInfo")
			}
		})
	}
}

// A nil gate or an option given a value it cannot use panics where the
// interceptor is built, naming it.
func TestNewInterceptorPanics(t *testing.T) {
	g := testGate(t, redisClient(t))
	for name, f := range map[string]func(){
		"nil gate":             func() { connectlimit.NewInterceptor(nil) },
		"WithDeniedCode":       func() { connectlimit.NewInterceptor(g, connectlimit.WithDeniedCode(connect.CodeInternal)) },
		"WithDomain":           func() { connectlimit.NewInterceptor(g, connectlimit.WithDomain("")) },
		"WithFilter":           func() { connectlimit.NewInterceptor(g, connectlimit.WithFilter(nil)) },
		"WithErrorHandler":     func() { connectlimit.NewInterceptor(g, connectlimit.WithErrorHandler(nil)) },
		"WithMessageCost":      func() { connectlimit.NewInterceptor(g, connectlimit.WithMessageCost("upload", 0)) },
		"WithMessageCost name": func() { connectlimit.NewInterceptor(g, connectlimit.WithMessageCost("", 1)) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				want := strings.Fields(name)[0]
				if !strings.HasPrefix(msg, "tollgate: connectlimit.NewInterceptor: ") || !strings.Contains(msg, want) {
					t.Errorf("panic %v, want one naming %s", r, want)
				}
			}()
			f()
		})
	}
	// nil options are skipped; the valid values are taken
	connectlimit.NewInterceptor(g, nil, connectlimit.WithDeniedCode(connect.CodeUnavailable), connectlimit.WithDomain("example.com"))
}

// The retrying client waits the hint (plus jitter) and succeeds, on every
// protocol.
func TestClientRetries(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			g := testGate(t, redisClient(t))
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(g)))
			w := &waits{}
			c := newCaller(t, url, proto, connect.WithInterceptors(connectlimit.NewClientInterceptor(retry.WithSleep(w.sleep))))
			// the default class: 3 tokens at 1/s; every call succeeds, the
			// fourth or so after a wait
			calls, ws := untilRetried(t, 10, func(i int) {
				if _, err := c.unary(pProfile); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}, w.take)
			if calls < 4 || len(ws) != 1 || ws[0] <= 0 || ws[0] > time.Second+retry.DefaultMinJitter+time.Second/5 {
				t.Errorf("call %d waited %v, want the fourth call or later to wait once the hint (at most 1 s) plus jitter", calls, ws)
			}
			if n := svc.calls.Load(); n != int64(calls) {
				t.Errorf("handler calls %d, want %d (the denied attempt never reached it)", n, calls)
			}
		})
	}
}

// waits records what a retry policy waited, and waits it.
type waits struct {
	mu sync.Mutex
	ds []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.ds = append(w.ds, d)
	w.mu.Unlock()
	return retry.Sleep(ctx, d)
}

// take returns the waits so far and forgets them.
func (w *waits) take() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := w.ds
	w.ds = nil
	return ds
}

// untilRetried makes calls (each must succeed) until the retrying client
// has waited, at most n: however slowly the machine runs (a bucket refills
// between two calls), one of them finds the bucket empty. It returns how
// many calls it made and the waits.
func untilRetried(t *testing.T, n int, call func(i int), waited func() []time.Duration) (calls int, ws []time.Duration) {
	t.Helper()
	for i := range n {
		call(i)
		if ws = waited(); len(ws) > 0 {
			return i + 1, ws
		}
	}
	t.Fatalf("%d calls, none throttled and retried", n)
	return n, nil
}

// With cost reports, a unary handler's report settles the reservation
// when it returns: a call that reports 0 is refunded before its answer
// goes out, so the next call finds the token back.
func TestSettleUnary(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			lim := newLimiter(t, redisClient(t))
			g, err := gate.New(lim, gate.WithCostReports())
			if err != nil {
				t.Fatal(err)
			}
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(g)))
			c := newCaller(t, url, proto, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
				return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
					req.Header().Set(conformance.ActualCostHeader, "0")
					return next(ctx, req)
				}
			})))
			for i := range 6 { // twice the default class's 3 tokens
				meta, err := c.unary(pProfile)
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if got := meta.Get("X-Ratelimit-Remaining"); got != "2" {
					t.Errorf("call %d: X-RateLimit-Remaining %q, want 2 (the last call refunded)", i+1, got)
				}
			}
		})
	}
}

// The retrying client retries a stream throttled when it opened: a server
// stream after the hint, and a client stream with its messages sent again
// on the new attempt.
func TestClientRetriesStreams(t *testing.T) {
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			svc := &service{}
			url := server(t, svc.mux(false, connectlimit.NewInterceptor(testGate(t, redisClient(t)))))
			w := &waits{}
			c := newCaller(t, url, proto, connect.WithInterceptors(connectlimit.NewClientInterceptor(retry.WithSleep(w.sleep))))

			// Export: class fast, 1 token refilled in 200 ms
			calls, ws := untilRetried(t, 10, func(i int) {
				req := connect.NewRequest(&emptypb.Empty{})
				c.header(req.Header())
				st, err := connect.NewClient[emptypb.Empty, wrapperspb.Int64Value](c.hc, url+pExport, c.opts()...).CallServerStream(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				n := 0
				for st.Receive() {
					n++
				}
				if err := st.Err(); err != nil || n != 3 {
					t.Fatalf("export %d: %d messages, %v", i+1, n, err)
				}
			}, w.take)
			if calls < 2 || len(ws) != 1 || ws[0] <= 0 || ws[0] > time.Second {
				t.Errorf("export %d waited %v, want the second or later to wait once the hint (200 ms at most) plus jitter", calls, ws)
			}

			// Upload: class upload, 2 tokens at 1/s; a stream throttled when
			// it opens is sent again, its messages with it
			calls, ws = untilRetried(t, 10, func(i int) {
				st := connect.NewClient[wrapperspb.Int64Value, wrapperspb.Int64Value](c.hc, url+pUpload, c.opts()...).CallClientStream(t.Context())
				c.header(st.RequestHeader())
				for j := range 4 {
					if err := st.Send(wrapperspb.Int64(int64(j))); err != nil {
						t.Fatalf("upload %d: send %d: %v", i+1, j, err)
					}
				}
				res, err := st.CloseAndReceive()
				if err != nil || res.Msg.GetValue() != 4 {
					t.Fatalf("upload %d: %v, %v; want all 4 messages received", i+1, res, err)
				}
			}, w.take)
			if calls < 3 || len(ws) != 1 || ws[0] <= 0 || ws[0] > time.Second+retry.DefaultMinJitter+time.Second/5 {
				t.Errorf("upload %d waited %v, want the third or later to wait once the hint (1 s at most) plus jitter", calls, ws)
			}
		})
	}
}

// A handler's own error still carries the rate-limit headers, in the
// response headers (so a gRPC client sees the call was answered), and a
// shared error value is never changed.
func TestHandlerErrorHeaders(t *testing.T) {
	shared := connect.NewError(connect.CodeNotFound, errors.New("no such item"))
	for _, proto := range allProtocols {
		t.Run(proto, func(t *testing.T) {
			lim := newLimiter(t, redisClient(t))
			g, err := gate.New(lim)
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle(pProfile, connect.NewUnaryHandler(pProfile, func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
				return nil, shared
			}, connect.WithInterceptors(auth{}, connectlimit.NewInterceptor(g))))
			url := server(t, mux)
			for i := range 2 {
				meta, err := newCaller(t, url, proto).unary(pProfile)
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Fatalf("call %d: %v, want the handler's CodeNotFound", i+1, err)
				}
				if got := meta.Values("X-Ratelimit-Remaining"); len(got) != 1 || got[0] != fmt.Sprint(2-i) {
					t.Errorf("call %d: X-RateLimit-Remaining %q, want [%d]", i+1, got, 2-i)
				}
			}
		})
	}
	if len(shared.Meta()) != 0 {
		t.Errorf("the handler's shared error was given metadata %v", shared.Meta())
	}
}
