package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/grpclimit/internal/testpb"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// Full methods of the test service.
const (
	mProfile = "/tollgate.test.v1.TestService/GetProfile"
	mItem    = "/tollgate.test.v1.TestService/GetItem"
	mExport  = "/tollgate.test.v1.TestService/ExportReport"
	mUpload  = "/tollgate.test.v1.TestService/Upload"
)

// backends: every scenario runs on a standalone Redis and on a Cluster.
var backends = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t) }},
}

func forEachBackend(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.client(t))
		})
	}
}

// tiers: tier "free" has class default (3 tokens, 1/s), class export (10,
// 0.5/s), class upload (2, 1/s), class tiny (2, 1/s), class fast (1,
// 5/s: a denial waits 200 ms) and class reports (one in flight); tier "ceiling"
// adds a tenant-wide ceiling of 2 over a roomy default class.
func testTiers() quota.Tiers {
	ceiling := quota.Quota{Capacity: 2, RefillPerSecond: 1}
	return quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 3, RefillPerSecond: 1},
			"export":  {Capacity: 10, RefillPerSecond: 0.5},
			"upload":  {Capacity: 2, RefillPerSecond: 1},
			"tiny":    {Capacity: 2, RefillPerSecond: 1},
			"fast":    {Capacity: 1, RefillPerSecond: 5},
			"reports": {Capacity: 100, RefillPerSecond: 10, Concurrency: 1},
			"llm":     {Capacity: 1000, RefillPerSecond: 0.01},
		}},
		"ceiling":   {Classes: map[string]quota.Quota{"default": {Capacity: 100, RefillPerSecond: 100}}, Ceiling: &ceiling},
		"anonymous": {Classes: map[string]quota.Quota{"default": {Capacity: 1, RefillPerSecond: 0.1}}},
	}}
}

// newLimiter is a limiter on testTiers over c (see testkit.NewLimiter),
// with a 2 s timeout.
func newLimiter(t testing.TB, c redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	return testkit.NewLimiter(t, c, testTiers(), append([]core.Option{core.WithTimeout(2 * time.Second)}, opts...)...)
}

// deadRedis is a client of a port nothing listens on: every check fails
// as a store failure.
func deadRedis(t testing.TB) redis.UniversalClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// service is the test service: every handler counts its calls.
type service struct {
	testpb.UnimplementedTestServiceServer
	calls    atomic.Int64
	received atomic.Int64 // Upload messages the handler got
}

func (s *service) GetProfile(ctx context.Context, _ *testpb.GetProfileRequest) (*testpb.Profile, error) {
	s.calls.Add(1)
	if err := reportCost(ctx); err != nil {
		return nil, err
	}
	t, _ := gate.TenantFromContext(ctx)
	return &testpb.Profile{Tenant: t.ID}, nil
}

func (s *service) GetItem(_ context.Context, r *testpb.GetItemRequest) (*testpb.Item, error) {
	s.calls.Add(1)
	return &testpb.Item{Id: r.GetId()}, nil
}

func (s *service) ExportReport(r *testpb.ExportReportRequest, st grpc.ServerStreamingServer[testpb.ReportChunk]) error {
	s.calls.Add(1)
	for i := range max(r.GetChunks(), 1) {
		if err := st.Send(&testpb.ReportChunk{Seq: i}); err != nil {
			return err
		}
	}
	return reportCost(st.Context()) // at the stream's end, when its cost is known
}

func (s *service) Upload(st grpc.BidiStreamingServer[testpb.UploadChunk, testpb.UploadAck]) error {
	s.calls.Add(1)
	for seq := int32(0); ; seq++ {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return reportCost(st.Context())
			}
			return err
		}
		s.received.Add(1)
		if err := st.Send(&testpb.UploadAck{Seq: seq}); err != nil {
			return err
		}
	}
}

// reportCost reports the actual cost the client asked for in the
// "x-actual-cost" metadata (conformance.ActualCostHeader), if any, with
// gate.ReportCost on ctx; a failed report is the call's error.
func reportCost(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	return conformance.ReportActualCost(ctx, first(md, strings.ToLower(conformance.ActualCostHeader)))
}

// authenticate is the test authentication layer: it puts the identity of
// the "authorization" metadata in the context, as a real auth interceptor
// would after verifying a token. It rejects nothing.
func authenticate(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get("authorization"); len(vs) > 0 {
		if t, ok := conformance.Authenticate(vs[0]); ok {
			return gate.ContextWithTenant(ctx, t)
		}
	}
	return ctx
}

type authStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authStream) Context() context.Context { return s.ctx }

func authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(authenticate(ctx), req)
}

func authStreamInt(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, authStream{ss, authenticate(ss.Context())})
}

// peerListener hands the server connections whose remote address is the
// IP the dialler wrote first (a one-line PROXY-protocol stand-in), so
// tests can choose the peer address bufconn cannot.
type peerListener struct{ *bufconn.Listener }

type peerConn struct {
	net.Conn
	addr net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	var b [1]byte
	var ip []byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			c.Close()
			return nil, err
		}
		if b[0] == '\n' {
			break
		}
		ip = append(ip, b[0])
	}
	return peerConn{c, &net.TCPAddr{IP: net.ParseIP(string(ip)), Port: 40000}}, nil
}

// env is a running test service behind the interceptors.
type env struct {
	svc *service
	lis peerListener
	// attempts counts calls reaching the limiter (server side, before it).
	attempts atomic.Int64
	mu       sync.Mutex
	arrivals []time.Time
}

// serverOpts are extra server options (interceptors run after auth and
// before grpclimit's).
func newEnv(t testing.TB, g *gate.Gate, opts ...grpclimit.Option) *env {
	t.Helper()
	return newServerEnv(t, g, nil, opts...)
}

// newServerEnv is newEnv whose server also takes srvOpts.
func newServerEnv(t testing.TB, g *gate.Gate, srvOpts []grpc.ServerOption, opts ...grpclimit.Option) *env {
	t.Helper()
	e := &env{svc: &service{}, lis: peerListener{bufconn.Listen(1 << 20)}}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		e.arrive()
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		e.arrive()
		return h(srv, ss)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(count, authUnary, grpclimit.UnaryServerInterceptor(g, opts...)),
		grpc.ChainStreamInterceptor(countStream, authStreamInt, grpclimit.StreamServerInterceptor(g, opts...)),
	}, srvOpts...)...)
	testpb.RegisterTestServiceServer(srv, e.svc)
	healthpb.RegisterHealthServer(srv, health{svc: e.svc})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(e.lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return e
}

func (e *env) arrive() {
	e.attempts.Add(1)
	e.mu.Lock()
	e.arrivals = append(e.arrivals, time.Now())
	e.mu.Unlock()
}

func (e *env) arrivalTimes() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.arrivals...)
}

// dial returns a client connection whose peer address is ip (default
// 198.51.100.1).
func (e *env) dial(t testing.TB, ip string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if ip == "" {
		ip = conformance.DefaultClientIP
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := e.lis.DialContext(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := io.WriteString(c, ip+"\n"); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func (e *env) client(t testing.TB, opts ...grpc.DialOption) testpb.TestServiceClient {
	return testpb.NewTestServiceClient(e.dial(t, "", opts...))
}

// as returns a context presenting tenant (tier) to the service.
func as(tenant, tier string) context.Context {
	a := conformance.Request{Tenant: tenant, Tier: tier}.Authorization()
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", a)
}

// result is one call's outcome as the client saw it.
type result struct {
	err     error
	st      *status.Status
	header  metadata.MD
	trailer metadata.MD
}

func getProfile(ctx context.Context, c testpb.TestServiceClient) result {
	var r result
	_, r.err = c.GetProfile(ctx, &testpb.GetProfileRequest{}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	r.st = status.Convert(r.err)
	return r
}

// export opens an ExportReport stream and reads it to the end.
func export(ctx context.Context, c testpb.TestServiceClient) result {
	var r result
	st, err := c.ExportReport(ctx, &testpb.ExportReportRequest{Chunks: 2})
	if err != nil {
		r.err, r.st = err, status.Convert(err)
		return r
	}
	r.header, _ = st.Header()
	for {
		if _, err := st.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			break
		}
	}
	r.trailer = st.Trailer()
	r.st = status.Convert(r.err)
	return r
}

func first(md metadata.MD, k string) string {
	if vs := md.Get(k); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
