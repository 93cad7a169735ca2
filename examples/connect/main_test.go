package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tollgate-go/tollgate/connectlimit"
	"github.com/tollgate-go/tollgate/core/retry"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"github.com/tollgate-go/tollgate/examples/internal/grpctest"
	"github.com/tollgate-go/tollgate/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { apptest.Main(m) }

// serve runs the example on a loopback port, speaking HTTP/1.1 and
// cleartext HTTP/2 as main does; it returns the base URL.
func serve(t *testing.T, a *app.App) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(NewHandler(a))
	srv.Config.Protocols = Protocols()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// h2c is an HTTP client that speaks cleartext HTTP/2, for connect-go's
// gRPC protocol.
func h2c(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// grpcConn is a grpc-go connection to the example.
func grpcConn(t *testing.T, url string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// drain spends a free tenant's default bucket (capacity 20) with
// GetProfile calls over the Connect protocol until one is denied.
func drain(t *testing.T, url, auth string) {
	t.Helper()
	c := connect.NewClient[demopb.GetProfileRequest, demopb.Profile](http.DefaultClient, url+ProcedureGetProfile)
	for i := range 100 {
		req := connect.NewRequest(&demopb.GetProfileRequest{})
		req.Header().Set("Authorization", auth)
		_, err := c.CallUnary(t.Context(), req)
		switch connect.CodeOf(err) {
		case connect.CodeResourceExhausted:
			if i < 20 {
				t.Fatalf("denied after %d calls, want 20 admitted first", i)
			}
			return
		case connect.CodeUnknown:
			if err == nil {
				continue
			}
		}
		t.Fatalf("GetProfile #%d: %v", i+1, err)
	}
	t.Fatal("100 GetProfile calls admitted: the limiter did not deny")
}

// untilDenied calls call until it reports a denial, at most 5 times: the
// bucket refills 2 tokens a second, so a call that comes after a refill is
// admitted (and takes the token) and the next one is denied.
func untilDenied(t *testing.T, call func() (denied bool)) {
	t.Helper()
	for range 5 {
		if call() {
			return
		}
	}
	t.Fatal("5 calls on a drained bucket admitted")
}

// retryDelay is the RetryInfo among details, nil without one.
func retryDelay(details []proto.Message) *errdetails.RetryInfo {
	var ri *errdetails.RetryInfo
	for _, d := range details {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	return ri
}

// wantRateLimited holds a denial of the free default bucket (20, 2/s) to
// its hint and its headers, whatever the protocol put them in.
func wantRateLimited(t *testing.T, who string, ri *errdetails.RetryInfo, get func(string) string) {
	t.Helper()
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > time.Second {
		t.Errorf("%s: RetryInfo %v, want a delay in (0, 1 s] (2 tokens/s)", who, ri)
	}
	if got := get("Retry-After"); got != "1" {
		t.Errorf("%s: Retry-After %q, want 1", who, got)
	}
	if got := get("X-RateLimit-Limit"); got != "20" {
		t.Errorf("%s: X-RateLimit-Limit %q, want 20", who, got)
	}
	if got := get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("%s: X-RateLimit-Remaining %q, want 0", who, got)
	}
	if got := get("RateLimit-Policy"); got != `"default";q=20;w=10` {
		t.Errorf("%s: RateLimit-Policy %q", who, got)
	}
	if got := get("RateLimit"); !strings.HasPrefix(got, `"default";r=0;t=`) {
		t.Errorf("%s: RateLimit %q", who, got)
	}
	if ms, err := strconv.ParseInt(get("Grpc-Retry-Pushback-Ms"), 10, 64); err != nil || ms <= 0 || ms > 1000 {
		t.Errorf("%s: grpc-retry-pushback-ms %q, want 1..1000", who, get("Grpc-Retry-Pushback-Ms"))
	}
}

// Over quota, every protocol connect-go serves answers RESOURCE_EXHAUSTED
// with RetryInfo and the rate-limit metadata: a grpc-go client, a
// connect-go client on the Connect protocol, and a gRPC-Web request sent
// as a plain HTTP POST.
func TestConnectOverQuotaOnEveryProtocol(t *testing.T) {
	a := apptest.New(t)
	url := serve(t, a)
	auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
	drain(t, url, auth)

	t.Run("grpc-go", func(t *testing.T) {
		c := demopb.NewDemoClient(grpcConn(t, url))
		untilDenied(t, func() bool {
			var trailer metadata.MD
			_, err := c.GetProfile(grpctest.WithAuth(t.Context(), auth), &demopb.GetProfileRequest{}, grpc.Trailer(&trailer))
			st := status.Convert(err)
			switch st.Code() {
			case codes.OK:
				return false
			case codes.ResourceExhausted:
			default:
				t.Fatalf("GetProfile: %v, want ResourceExhausted", err)
			}
			wantRateLimited(t, "grpc-go", grpctest.RetryInfo(st), func(k string) string {
				if vs := trailer.Get(k); len(vs) == 1 {
					return vs[0]
				}
				return ""
			})
			return true
		})
	})

	t.Run("connect-go on the Connect protocol", func(t *testing.T) {
		c := connect.NewClient[demopb.GetProfileRequest, demopb.Profile](http.DefaultClient, url+ProcedureGetProfile)
		untilDenied(t, func() bool {
			req := connect.NewRequest(&demopb.GetProfileRequest{})
			req.Header().Set("Authorization", auth)
			_, err := c.CallUnary(t.Context(), req)
			if err == nil {
				return false
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
				t.Fatalf("GetProfile: %v, want CodeResourceExhausted", err)
			}
			var details []proto.Message
			for _, d := range ce.Details() {
				if m, err := d.Value(); err == nil {
					details = append(details, m)
				}
			}
			wantRateLimited(t, "connect", retryDelay(details), ce.Meta().Get)
			return true
		})
	})

	t.Run("connect protocol is HTTP 429 with Retry-After", func(t *testing.T) {
		untilDenied(t, func() bool {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+ProcedureGetProfile, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", auth)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return false
			}
			if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"code":"resource_exhausted"`) {
				t.Fatalf("POST: %d %s, want 429 resource_exhausted", res.StatusCode, body)
			}
			if res.Header.Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1", res.Header.Get("Retry-After"))
			}
			return true
		})
	})

	t.Run("grpc-web as a plain HTTP POST", func(t *testing.T) {
		untilDenied(t, func() bool {
			msg, _ := proto.Marshal(&demopb.GetProfileRequest{})
			frame := make([]byte, 5, 5+len(msg))
			binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+ProcedureGetProfile, bytes.NewReader(append(frame, msg...)))
			req.Header.Set("Content-Type", "application/grpc-web+proto")
			req.Header.Set("X-Grpc-Web", "1")
			req.Header.Set("Authorization", auth)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK && res.Header.Get("Grpc-Status") == "" {
				return false // admitted: the status is in the body's trailers frame
			}
			// nothing was sent before the error: a trailers-only answer, its
			// trailers in the HTTP headers
			if res.StatusCode != http.StatusOK || res.Header.Get("Grpc-Status") != strconv.Itoa(int(codes.ResourceExhausted)) {
				t.Fatalf("POST: HTTP %d grpc-status %q, want 200 and %d", res.StatusCode, res.Header.Get("Grpc-Status"), codes.ResourceExhausted)
			}
			raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(res.Header.Get("Grpc-Status-Details-Bin"), "="))
			var sp spb.Status
			if err != nil || proto.Unmarshal(raw, &sp) != nil {
				t.Fatalf("grpc-status-details-bin %q: %v", res.Header.Get("Grpc-Status-Details-Bin"), err)
			}
			var details []proto.Message
			for _, d := range sp.GetDetails() {
				if m, err := d.UnmarshalNew(); err == nil {
					details = append(details, m)
				}
			}
			wantRateLimited(t, "grpc-web", retryDelay(details), res.Header.Get)
			return true
		})
	})
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

// untilRetried makes calls on a drained bucket (each must succeed) until
// the retrying client has waited, at most 5: one that comes after a
// refill is admitted without a wait, and takes the token.
func untilRetried(t *testing.T, w *waits, call func() error) {
	t.Helper()
	for i := range 5 {
		if err := call(); err != nil {
			t.Fatalf("call %d with retries: %v", i+1, err)
		}
		w.mu.Lock()
		ds := w.ds
		w.mu.Unlock()
		if len(ds) == 0 {
			continue
		}
		// one wait or two (3 attempts), each the hint (at most 500 ms for
		// a token at 2/s) plus jitter
		if len(ds) > 2 {
			t.Errorf("waits %v, want one or two", ds)
		}
		for _, d := range ds {
			if d <= 0 || d > time.Second/2+retry.DefaultMinJitter+time.Second/10 {
				t.Errorf("wait %v, want the hint (at most 500 ms) plus jitter", d)
			}
		}
		return
	}
	t.Fatal("5 calls on a drained bucket, none throttled and retried")
}

// tollgate's retrying clients back off by the denial's hint and then
// succeed: grpc-go with grpclimit's interceptor, connect-go with
// connectlimit's on every protocol.
func TestConnectRetryClientsBackOff(t *testing.T) {
	a := apptest.New(t)
	url := serve(t, a)

	t.Run("grpc-go with grpclimit.UnaryClientInterceptor", func(t *testing.T) {
		auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
		drain(t, url, auth)
		w := &waits{}
		c := demopb.NewDemoClient(grpcConn(t, url, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(retry.WithSleep(w.sleep)))))
		untilRetried(t, w, func() error {
			p, err := c.GetProfile(grpctest.WithAuth(t.Context(), auth), &demopb.GetProfileRequest{})
			if err == nil && p.GetTier() != "free" {
				t.Errorf("GetProfile = %v", p)
			}
			return err
		})
	})

	for name, opts := range map[string][]connect.ClientOption{
		"connect": nil,
		"grpc":    {connect.WithGRPC()},
		"grpcweb": {connect.WithGRPCWeb()},
	} {
		t.Run("connect-go "+name+" with connectlimit.NewClientInterceptor", func(t *testing.T) {
			auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
			drain(t, url, auth)
			w := &waits{}
			c := connect.NewClient[demopb.GetProfileRequest, demopb.Profile](h2c(t), url+ProcedureGetProfile,
				append(opts, connect.WithInterceptors(connectlimit.NewClientInterceptor(retry.WithSleep(w.sleep))))...)
			untilRetried(t, w, func() error {
				req := connect.NewRequest(&demopb.GetProfileRequest{})
				req.Header().Set("Authorization", auth)
				res, err := c.CallUnary(t.Context(), req)
				if err == nil && res.Msg.GetTier() != "free" {
					t.Errorf("GetProfile = %v", res.Msg)
				}
				return err
			})
		})
	}
}

// export opens an ExportReport stream of two chunks over the Connect
// protocol and reads it to the end.
func export(t *testing.T, url, auth string) (chunks int, err error) {
	t.Helper()
	req := connect.NewRequest(&demopb.ExportReportRequest{Chunks: 2})
	req.Header().Set("Authorization", auth)
	st, err := connect.NewClient[demopb.ExportReportRequest, demopb.ReportChunk](http.DefaultClient, url+ProcedureExportReport).CallServerStream(t.Context(), req)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	for st.Receive() {
		chunks++
	}
	return chunks, st.Err()
}

// The service itself: tokens, the export stream's class, /healthz and
// /metrics beside the procedures.
func TestConnectService(t *testing.T) {
	a := apptest.New(t)
	url := serve(t, a)

	t.Run("no or bad token is Unauthenticated, before the limiter", func(t *testing.T) {
		c := connect.NewClient[demopb.GetProfileRequest, demopb.Profile](http.DefaultClient, url+ProcedureGetProfile)
		for _, bad := range apptest.BadTokens(t) {
			req := connect.NewRequest(&demopb.GetProfileRequest{})
			if bad.Authorization != "" {
				req.Header().Set("Authorization", bad.Authorization)
			}
			_, err := c.CallUnary(t.Context(), req)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || ce.Message() != bad.Detail {
				t.Errorf("%s: %v, want CodeUnauthenticated saying %q", bad.Name, err, bad.Detail)
				continue
			}
			if ce.Meta().Get("X-Ratelimit-Limit") != "" {
				t.Errorf("%s: the limiter ran before authentication", bad.Name)
			}
		}
	})

	t.Run("free export stream is denied after two, before any chunk", func(t *testing.T) {
		auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
		for i := range 2 {
			if n, err := export(t, url, auth); err != nil || n != 2 {
				t.Fatalf("export #%d: %d chunks, %v", i+1, n, err)
			}
		}
		n, err := export(t, url, auth)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || n != 0 {
			t.Fatalf("export #3: %d chunks, %v; want CodeResourceExhausted before any chunk", n, err)
		}
		var details []proto.Message
		for _, d := range ce.Details() {
			if m, err := d.Value(); err == nil {
				details = append(details, m)
			}
		}
		if ri := retryDelay(details); ri == nil || ri.GetRetryDelay().AsDuration() < 45*time.Second || ri.GetRetryDelay().AsDuration() > 50*time.Second {
			t.Errorf("RetryInfo %v, want 45..50 s (5 tokens at 0.1/s)", ri)
		}
		if s, _ := strconv.Atoi(ce.Meta().Get("Retry-After")); s < 45 || s > 50 {
			t.Errorf("Retry-After %q, want 45..50", ce.Meta().Get("Retry-After"))
		}
	})

	t.Run("reports allows two in flight per free tenant", func(t *testing.T) {
		// six at once, each about 200 ms: two run, the others find both
		// slots taken (however the machine schedules them, some overlap)
		auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
		c := connect.NewClient[demopb.ListReportsRequest, demopb.ReportList](http.DefaultClient, url+ProcedureListReports)
		errs := make([]error, 6)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				req := connect.NewRequest(&demopb.ListReportsRequest{})
				req.Header().Set("Authorization", auth)
				_, errs[i] = c.CallUnary(t.Context(), req)
			})
		}
		wg.Wait()
		ok, denied := 0, 0
		for _, err := range errs {
			var ce *connect.Error
			switch {
			case err == nil:
				ok++
			case errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted && strings.Contains(ce.Message(), `Concurrency limit of policy "reports"`):
				denied++
			default:
				t.Errorf("ListReports: %v", err)
			}
		}
		if ok < 2 || denied < 1 {
			t.Errorf("six ListReports at once: %d ran, %d denied; want two or more run and some denied", ok, denied)
		}
	})

	t.Run("healthz and metrics need no token", func(t *testing.T) {
		auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
		_, _ = export(t, url, auth)
		if r := apptest.Do(t, http.MethodGet, url+app.PathHealth, ""); r.Status != http.StatusOK {
			t.Errorf("healthz: %d", r.Status)
		}
		r := apptest.Do(t, http.MethodGet, url+app.PathMetrics, "")
		if r.Status != http.StatusOK {
			t.Fatalf("metrics: %d", r.Status)
		}
		apptest.AssertDecisionSeries(t, r.Body)
	})
}
