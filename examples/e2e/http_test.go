package e2e_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// httpExamples are the six HTTP examples (both majors of Echo and Fiber),
// held to the same answers.
var httpExamples = []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3"}

// Which token a step sends.
const (
	noToken     = ""
	freeToken   = "free"
	proToken    = "pro"
	wrongSecret = "wrong-secret"
)

// step is one request of the sequence every HTTP example is driven
// through, and what its answer must be. In want, "" means the header must
// be absent.
type step struct {
	name         string
	method, path string
	token        string
	times        int // 0 is once
	status       int
	want         map[string]string
	check        func(t *testing.T, r response, tenant string)
}

// sequence is the README's walk-through: health, 401s, a profile, the free
// tier's export denied on the third call, the pro tier, /metrics.
var sequence = []step{
	{name: "healthz is open and never limited", method: http.MethodGet, path: app.PathHealth, times: 25, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "", "RateLimit": "", "Retry-After": ""},
		check: func(t *testing.T, r response, _ string) {
			if r.body != `{"status":"ok"}` {
				t.Errorf("healthz body %q", r.body)
			}
		}},
	{name: "profile without a token", method: http.MethodGet, path: app.PathProfile, token: noToken, status: http.StatusUnauthorized,
		want: unauthorized, check: problem(http.StatusUnauthorized)},
	{name: "export without a token", method: http.MethodPost, path: app.PathExport, token: noToken, status: http.StatusUnauthorized,
		want: unauthorized, check: problem(http.StatusUnauthorized)},
	{name: "profile with a token signed by another secret", method: http.MethodGet, path: app.PathProfile, token: wrongSecret, status: http.StatusUnauthorized,
		want: unauthorized, check: problem(http.StatusUnauthorized)},
	{name: "profile", method: http.MethodGet, path: app.PathProfile, token: freeToken, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "19", "X-RateLimit-Reset": "1",
			"RateLimit": `"default";r=19;t=1`, "RateLimit-Policy": `"default";q=20;w=10`, "Retry-After": ""},
		check: func(t *testing.T, r response, tenant string) {
			if want := fmt.Sprintf(`{"tenant":%q,"tier":"free"}`, tenant); r.body != want {
				t.Errorf("profile body %s, want %s", r.body, want)
			}
		}},
	{name: "export #1", method: http.MethodPost, path: app.PathExport, token: freeToken, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "5", "RateLimit-Policy": `"export";q=10;w=100`, "Retry-After": ""}},
	{name: "export #2", method: http.MethodPost, path: app.PathExport, token: freeToken, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "RateLimit-Policy": `"export";q=10;w=100`, "Retry-After": ""}},
	{name: "export #3 is denied", method: http.MethodPost, path: app.PathExport, token: freeToken, status: http.StatusTooManyRequests,
		want: map[string]string{"Content-Type": render.ProblemContentType, "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0",
			"RateLimit-Policy": `"export";q=10;w=100`},
		check: func(t *testing.T, r response, tenant string) {
			problem(http.StatusTooManyRequests)(t, r, tenant)
			// 5 tokens short at 0.1/s: 50 s, less what refilled since the
			// first export (the README shows 50).
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || ra < 45 || ra > 50 {
				t.Errorf("Retry-After = %q, want 45..50", r.header.Get("Retry-After"))
			}
			if want := `"export";r=0;t=` + strconv.Itoa(ra); r.header.Get("RateLimit") != want {
				t.Errorf("RateLimit = %q, want %q", r.header.Get("RateLimit"), want)
			}
			var p render.Problem
			if err := json.Unmarshal([]byte(r.body), &p); err != nil || !slices.Equal(p.ViolatedPolicies, []string{app.ClassExport}) {
				t.Errorf("429 body %s does not name the export policy (%v)", r.body, err)
			}
		}},
	{name: "profile after the denied export (classes are separate buckets)", method: http.MethodGet, path: app.PathProfile, token: freeToken, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "18", "Retry-After": ""}},
	{name: "pro export", method: http.MethodPost, path: app.PathExport, token: proToken, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "95", "RateLimit-Policy": `"export";q=100;w=50`}},
	{name: "metrics", method: http.MethodGet, path: app.PathMetrics, status: http.StatusOK,
		want: map[string]string{"X-RateLimit-Limit": ""},
		check: func(t *testing.T, r response, _ string) {
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("metrics Content-Type = %q, want text/plain", ct)
			}
			apptest.AssertDecisionSeries(t, r.body)
		}},
}

var unauthorized = map[string]string{"Content-Type": render.ProblemContentType, "WWW-Authenticate": app.WWWAuthenticate,
	"X-RateLimit-Limit": "", "RateLimit": "", "Retry-After": ""}

func problem(status int) func(*testing.T, response, string) {
	return func(t *testing.T, r response, _ string) {
		t.Helper()
		var p render.Problem
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != status || p.Detail == "" {
			t.Errorf("body %s is not a %d problem with a detail (%v)", r.body, status, err)
		}
	}
}

// response is what is kept of one answer.
type response struct {
	status int
	header http.Header
	body   string
}

// essentials is the part of an answer that must be the same from every
// framework: the status, the rate-limit and authentication headers (names
// case-insensitive, values exact), the media type, and the body (JSON
// compared by value, the tenant ID, which differs by process, replaced).
// Date, Content-Length and the charset Gin adds are left out.
type essentials struct {
	Status    int
	Headers   map[string][]string
	MediaType string
	Body      string
}

func (r response) essentials(tenants []string) essentials {
	c := essentials{Status: r.status, Headers: map[string][]string{}}
	for name, vs := range r.header {
		n := strings.ToLower(name)
		if strings.Contains(n, "ratelimit") || n == "retry-after" || n == "www-authenticate" {
			c.Headers[n] = vs
		}
	}
	c.MediaType, _, _ = mime.ParseMediaType(r.header.Get("Content-Type"))
	if c.MediaType == "text/plain" { // /metrics: the counts differ by process
		return c
	}
	body := r.body
	for _, tn := range tenants {
		body = strings.ReplaceAll(body, tn, "<tenant>")
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err == nil {
		b, _ := json.Marshal(v)
		body = string(b)
	}
	c.Body = body
	return c
}

// client is an HTTP client of its own, so that its idle connections can be
// closed before the processes are stopped.
type client struct {
	tr *http.Transport
	c  *http.Client
}

func newClient(t *testing.T) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{tr: tr, c: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

func (c *client) do(t *testing.T, method, url, authorization string) response {
	t.Helper()
	r := apptest.DoWith(t, c.c, method, url, authorization)
	return response{status: r.Status, header: r.Header, body: strings.TrimSpace(r.Body)}
}

// run is one HTTP example's process and what it answered.
type run struct {
	name    string
	p       *process
	base    string
	tenants map[string]string // token kind to tenant ID
	tokens  map[string]string // token kind to Authorization value
	answers [][]response      // per step, per repetition
}

// The six HTTP examples as real processes on one real Redis: the same
// sequence gives the same statuses, rate-limit headers and bodies from each,
// and the values the README shows; each exits 0 on SIGTERM.
func TestHTTPExamplesAsProcesses(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	binaries(t)

	runs := make([]*run, len(httpExamples))
	for i, name := range httpExamples {
		addr := freeAddr(t)
		runs[i] = &run{name: name, base: "http://" + addr,
			p: start(t, name, "ADDR="+addr, "REDIS_URL="+redisURL, "TOLLGATE_JWT_SECRET="+secret,
				"DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")}
	}
	// Mint while the services start.
	for _, r := range runs {
		r.tenants = map[string]string{freeToken: tenantID(t, r.name+"-free"), proToken: tenantID(t, r.name+"-pro"), wrongSecret: tenantID(t, r.name+"-x")}
		r.tokens = map[string]string{
			noToken:     "",
			freeToken:   "Bearer " + mint(t, secret, r.tenants[freeToken], "free"),
			proToken:    "Bearer " + mint(t, secret, r.tenants[proToken], "pro"),
			wrongSecret: "Bearer " + mint(t, "another-secret-0123456789abcdef", r.tenants[wrongSecret], "free"),
		}
	}
	for _, r := range runs {
		waitHealthy(t, r.p, r.base+app.PathHealth)
	}

	c := newClient(t)
	for _, r := range runs {
		// Each process's whole sequence runs in a few milliseconds, so the
		// time-derived values (Retry-After, reset) are the same whole
		// seconds in each.
		for _, s := range sequence {
			var rs []response
			for range max(s.times, 1) {
				rs = append(rs, c.do(t, s.method, r.base+s.path, r.tokens[s.token]))
			}
			r.answers = append(r.answers, rs)
		}
	}
	c.tr.CloseIdleConnections()

	// The values the README shows, from each.
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			for i, s := range sequence {
				t.Run(s.name, func(t *testing.T) {
					for j, a := range r.answers[i] {
						if a.status != s.status {
							t.Errorf("#%d: status %d, want %d; body %s", j+1, a.status, s.status, a.body)
							continue
						}
						for name, want := range s.want {
							if got := a.header.Get(name); got != want {
								t.Errorf("#%d: %s = %q, want %q", j+1, name, got, want)
							}
						}
						if s.check != nil {
							s.check(t, a, r.tenants[s.token])
						}
					}
				})
			}
		})
	}

	// The same answers from all six, net/http the reference.
	ref := runs[0]
	for _, r := range runs[1:] {
		for i, s := range sequence {
			for j := range r.answers[i] {
				want := ref.answers[i][j].essentials(slices.Collect(maps.Values(ref.tenants)))
				got := r.answers[i][j].essentials(slices.Collect(maps.Values(r.tenants)))
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s differs from %s on %q (#%d):\n got %+v\nwant %+v", r.name, ref.name, s.name, j+1, got, want)
				}
			}
		}
	}

	// SIGTERM: a clean exit, status 0, from each (in parallel, to keep the
	// run short).
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			t.Run("stop "+r.name, func(t *testing.T) { stop(t, r.p) })
		})
	}
	wg.Wait()
}
