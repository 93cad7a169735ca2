package apptest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/sqlquota"
)

// Response is what the suite reads of one answer.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends one request to url with an Authorization value (none when
// empty), on a client of its own, and reads the whole answer.
func Do(t testing.TB, method, url, authorization string) Response {
	t.Helper()
	return DoWith(t, &http.Client{Timeout: 10 * time.Second}, method, url, authorization)
}

// DoWith is Do on client c.
func DoWith(t testing.TB, c *http.Client, method, url, authorization string) Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

func expect(t testing.TB, what string, r Response, status int, headers map[string]string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.Status, status, r.Body)
	}
	for name, want := range headers {
		// http.Header.Get matches names case-insensitively, as the
		// frameworks canonicalise them differently.
		if got := r.Header.Get(name); got != want {
			t.Errorf("%s: header %s = %q, want %q", what, name, got, want)
		}
	}
}

// Handler builds an example's handler on a fresh App, serves it on a real
// local port and runs the HTTP suite against it.
func Handler(t *testing.T, newHandler func(*app.App) (http.Handler, error)) {
	a := New(t)
	h, err := newHandler(a)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	HTTP(t, a, srv.URL)
}

// Server builds an example's server on a fresh App and serves it with
// serve (which must return once its context is done) on a real local port
// until the test ends, then requires a clean shutdown; then it runs the
// HTTP suite against it. It is Handler for services that are not an
// http.Handler (Fiber).
func Server(t *testing.T, serve func(ctx context.Context, a *app.App, ln net.Listener) error) {
	a := New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, a, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	HTTP(t, a, "http://"+ln.Addr().String())
}

// HTTP runs the example service's HTTP contract against base (a running
// server of a, reached over a real connection): the same sequence and the
// same answers for every framework.
func HTTP(t *testing.T, a *app.App, base string) {
	profile, export := base+app.PathProfile, base+app.PathExport

	t.Run("healthz is open and never limited", func(t *testing.T) {
		for i := range 30 { // more than the free tier's burst of 20
			r := Do(t, http.MethodGet, base+app.PathHealth, "")
			expect(t, "healthz #"+strconv.Itoa(i+1), r, http.StatusOK, map[string]string{"X-RateLimit-Limit": "", "RateLimit": ""})
			if !strings.Contains(r.Body, `"ok"`) {
				t.Fatalf("healthz body %q", r.Body)
			}
		}
	})

	t.Run("no or bad token is 401 before the limiter", func(t *testing.T) {
		for _, bad := range BadTokens(t) {
			for _, ep := range []struct{ method, url string }{{http.MethodGet, profile}, {http.MethodPost, export}} {
				r := Do(t, ep.method, ep.url, bad.Authorization)
				expect(t, bad.Name+" "+ep.method, r, http.StatusUnauthorized, map[string]string{
					"Content-Type":      render.ProblemContentType,
					"WWW-Authenticate":  app.WWWAuthenticate,
					"X-RateLimit-Limit": "", // refused before the limiter ran
				})
				var p render.Problem
				if err := json.Unmarshal([]byte(r.Body), &p); err != nil || p.Status != 401 || p.Detail != bad.Detail {
					t.Errorf("%s: body %q is not a 401 problem with the detail %q (%v)", bad.Name, r.Body, bad.Detail, err)
				}
			}
		}
	})

	t.Run("reports allows two in flight per free tenant", func(t *testing.T) {
		// six at once, each about 200 ms: two run, the others find both
		// slots taken (however the machine schedules them, some overlap)
		auth := "Bearer " + Token(t, Tenant(t), "free")
		rs := make([]Response, 6)
		var wg sync.WaitGroup
		for i := range rs {
			wg.Add(1)
			go func() { defer wg.Done(); rs[i] = Do(t, http.MethodGet, base+app.PathReports, auth) }()
		}
		wg.Wait()
		ok, denied := 0, 0
		for _, r := range rs {
			switch r.Status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				denied++
				if !strings.Contains(r.Body, `"violated-policies":["reports/concurrency"]`) || r.Header.Get("Retry-After") == "" {
					t.Errorf("reports denial: %q, Retry-After %q; want the concurrency policy", r.Body, r.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("reports: status %d %q", r.Status, r.Body)
			}
		}
		if ok < 2 || denied < 1 {
			t.Errorf("six reports at once: %d ran, %d denied; want two or more run (one after another) and some denied", ok, denied)
		}
		if p := rs[0].Header.Get("RateLimit-Policy"); !strings.Contains(p, `"reports/concurrency";q=2;qu="concurrent-requests"`) {
			t.Errorf("RateLimit-Policy = %q", p)
		}
	})

	t.Run("profile is 200 with rate-limit headers", func(t *testing.T) {
		tenant := Tenant(t)
		auth := "Bearer " + Token(t, tenant, "free")
		r := Do(t, http.MethodGet, profile, auth)
		expect(t, "profile", r, http.StatusOK, map[string]string{
			"X-RateLimit-Limit":     "20",
			"X-RateLimit-Remaining": "19",
			"RateLimit-Policy":      `"default";q=20;w=10`,
			"Retry-After":           "",
		})
		if rl := r.Header.Get("RateLimit"); !strings.HasPrefix(rl, `"default";r=19;t=`) {
			t.Errorf("RateLimit = %q", rl)
		}
		var p app.Profile
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil || p != (app.Profile{Tenant: tenant, Tier: "free"}) {
			t.Errorf("profile body %q (%v)", r.Body, err)
		}
	})

	t.Run("free export is denied after two calls with 429 and Retry-After", func(t *testing.T) {
		auth := "Bearer " + Token(t, Tenant(t), "free")
		for i, remaining := range []string{"5", "0"} {
			r := Do(t, http.MethodPost, export, auth)
			expect(t, "export #"+strconv.Itoa(i+1), r, http.StatusOK, map[string]string{
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": remaining, "RateLimit-Policy": `"export";q=10;w=100`,
			})
		}
		r := Do(t, http.MethodPost, export, auth)
		expect(t, "export #3", r, http.StatusTooManyRequests, map[string]string{
			"Content-Type": render.ProblemContentType, "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0",
		})
		// 5 tokens short at 0.1/s: 50 s, less what refilled between calls.
		ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil || ra < 45 || ra > 50 {
			t.Errorf("Retry-After = %q, want 45..50 s", r.Header.Get("Retry-After"))
		}
		if rl := r.Header.Get("RateLimit"); !strings.HasSuffix(rl, ";t="+strconv.Itoa(ra)) {
			t.Errorf("RateLimit = %q, want t equal to Retry-After %d", rl, ra)
		}
		var p render.Problem
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil || p.Status != 429 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != app.ClassExport {
			t.Errorf("429 body %q (%v)", r.Body, err)
		}
		// Classes are separate buckets: the profile still answers.
		expect(t, "profile after exports", Do(t, http.MethodGet, profile, auth), http.StatusOK, map[string]string{"X-RateLimit-Limit": "20"})
	})

	t.Run("pro tier has its own quotas", func(t *testing.T) {
		auth := "Bearer " + Token(t, Tenant(t), "pro")
		for i := range 3 {
			expect(t, "pro export #"+strconv.Itoa(i+1), Do(t, http.MethodPost, export, auth), http.StatusOK,
				map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": strconv.Itoa(95 - 5*i)})
		}
	})

	t.Run("an override in the SQL store replaces the tier default", func(t *testing.T) {
		tenant := Tenant(t)
		if _, err := a.Overrides.Set(t.Context(), sqlquota.Override{TenantID: tenant, Bucket: app.ClassExport,
			Quota: quota.Quota{Capacity: 20, RefillPerSecond: 0.1}, UpdatedBy: "apptest", Reason: "test"}); err != nil {
			t.Fatalf("set override: %v", err)
		}
		auth := "Bearer " + Token(t, tenant, "free")
		for i := range 4 {
			expect(t, "export #"+strconv.Itoa(i+1), Do(t, http.MethodPost, export, auth), http.StatusOK, map[string]string{"X-RateLimit-Limit": "20"})
		}
		expect(t, "export #5", Do(t, http.MethodPost, export, auth), http.StatusTooManyRequests, map[string]string{"X-RateLimit-Limit": "20"})
	})

	t.Run("metrics serve the decisions in Prometheus text", func(t *testing.T) {
		auth := "Bearer " + Token(t, Tenant(t), "free")
		for range 3 {
			Do(t, http.MethodPost, export, auth)
		}
		r := Do(t, http.MethodGet, base+app.PathMetrics, "")
		expect(t, "metrics", r, http.StatusOK, map[string]string{"X-RateLimit-Limit": ""})
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("metrics Content-Type = %q, want text/plain", ct)
		}
		AssertDecisionSeries(t, r.Body)
	})
}

// AssertDecisionSeries checks that a Prometheus text exposition holds the
// tollgate_decisions counter with an allowed and a denied export sample.
func AssertDecisionSeries(t testing.TB, body string) {
	t.Helper()
	var allowed, denied bool
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "tollgate_decisions_total{") || !strings.Contains(line, `class="export"`) {
			continue
		}
		allowed = allowed || strings.Contains(line, `outcome="allowed"`)
		denied = denied || strings.Contains(line, `outcome="denied"`)
	}
	if !allowed || !denied {
		t.Errorf("metrics: no tollgate_decisions_total sample for an allowed (%v) and a denied (%v) export in:\n%s", allowed, denied, grep(body, "tollgate_"))
	}
}

func grep(body, s string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if strings.Contains(line, s) {
			b.WriteString(line)
		}
	}
	return b.String()
}
