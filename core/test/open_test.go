package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// tierFile is a tier file whose free tier holds capacity tokens of class
// default and 5 of export, refilled too slowly to matter in a test.
func tierFile(capacity int, extra string) string {
	return fmt.Sprintf(`default_tier: free
tiers:
  free:
    classes:
      default: {capacity: %d, refill_per_second: 0.001}
      export: {capacity: 5, refill_per_second: 0.001}
routes:
  - {method: GET, path: /v1/profile, class: default}
  - {method: GET, path: /healthz, exempt: true}
%s`, capacity, extra)
}

// aliasBomb returns a tier file of about size bytes whose aliases stand for
// n tiers of m classes each (n*m quotas) from n+m short lines.
func aliasBomb(size int) string {
	var b strings.Builder
	b.WriteString("default_tier: t0\ntiers:\n  t0: &t\n    classes:\n      c0: &q {capacity: 1, refill_per_second: 1}\n")
	for i := 1; b.Len() < size/2; i++ {
		fmt.Fprintf(&b, "      c%d: *q\n", i)
	}
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  t%d: *t\n", i)
	}
	return b.String()
}

func newTierFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	testkit.ReplaceFile(t, path, content)
	return path
}

// admitted counts how many of n checks of tenant's class default svc
// admits.
func admitted(t *testing.T, svc *config.Service, tenant string, n int) int {
	t.Helper()
	got := 0
	for range n {
		d, err := svc.Limiter.Allow(t.Context(), quota.Tenant{ID: tenant}, quota.DefaultClass, 1)
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

// TestOpenEveryRedisURLForm opens one service per URL form on real
// servers: a standalone Redis, a Cluster (seeds comma-separated, and
// repeated as addr), and a Sentinel-managed master (the master name in the
// path, and as master_name behind a dead Sentinel). Each must keep its
// buckets in that Redis, and Close must close the client it opened.
func TestOpenEveryRedisURLForm(t *testing.T) {
	path := newTierFile(t, tierFile(3, ""))
	type form struct {
		name string
		url  func(t *testing.T) (u string, direct redis.UniversalClient)
	}
	forms := []form{
		{"standalone", func(t *testing.T) (string, redis.UniversalClient) {
			return redistest.URL(t), redistest.Client(t)
		}},
		{"cluster comma seeds", func(t *testing.T) (string, redis.UniversalClient) {
			cc := redistest.SharedCluster(t)
			return "redis+cluster://" + strings.Join(cc.Options().Addrs, ","), cc
		}},
		{"cluster addr parameters", func(t *testing.T) (string, redis.UniversalClient) {
			cc := redistest.SharedCluster(t)
			addrs := cc.Options().Addrs
			return "redis+cluster://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr="), cc
		}},
		{"sentinel master in path", func(t *testing.T) (string, redis.UniversalClient) {
			master := redistest.NewServer(t)
			s := redistest.NewSentinel(t, "mymaster", master.Addr())
			return "redis+sentinel://" + s.Addr() + "/mymaster/0", master.Client(t)
		}},
		{"sentinel master_name behind a dead sentinel", func(t *testing.T) (string, redis.UniversalClient) {
			master := redistest.NewServer(t)
			s := redistest.NewSentinel(t, "other", master.Addr())
			return "redis+sentinel://127.0.0.1:1," + s.Addr() + "?master_name=other", master.Client(t)
		}},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			u, direct := f.url(t)
			prefix := redistest.Prefix(t)
			svc, err := config.Open(t.Context(), path, config.WithRedisURL(u),
				config.WithLimiterOptions(core.WithPrefix(prefix), core.WithTimeout(2*time.Second)))
			if err != nil {
				t.Fatalf("Open(%s): %v", u, err)
			}
			if got := admitted(t, svc, "t1", 5); got != 3 {
				t.Errorf("admitted %d of 5 on a bucket of 3", got)
			}
			key, err := svc.Limiter.Keys().Bucket("t1", quota.DefaultClass)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := direct.Exists(t.Context(), key).Result(); err != nil || n != 1 {
				t.Errorf("key %s in the Redis the URL names: exists %d, %v", key, n, err)
			}
			client := svc.Redis
			if err := svc.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := client.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
				t.Errorf("the client Open opened is still open after Close: Ping = %v", err)
			}
		})
	}
}

// TestOpenWithYourOwnClient leaves the caller's client open.
func TestOpenWithYourOwnClient(t *testing.T) {
	client := redistest.Client(t)
	svc, err := config.Open(t.Context(), newTierFile(t, tierFile(2, "")), config.WithRedisClient(client),
		config.WithLimiterOptions(core.WithPrefix(redistest.Prefix(t))))
	if err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, svc, "t1", 3); got != 2 {
		t.Errorf("admitted %d of 3 on a bucket of 2", got)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(t.Context()).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}

// TestOpenWithALimiterResolver: the limiter resolves through the resolver
// made from the file's, and the file's tiers behind it.
func TestOpenWithALimiterResolver(t *testing.T) {
	var given *quota.TieredResolver
	svc, err := config.Open(t.Context(), newTierFile(t, tierFile(3, "")), config.WithRedisURL(redistest.URL(t)),
		config.WithLimiterOptions(core.WithPrefix(redistest.Prefix(t))),
		config.WithLimiterResolver(func(tiers *quota.TieredResolver) (quota.Resolver, error) {
			given = tiers
			return quota.ResolverFunc(func(ctx context.Context, ten quota.Tenant, class string) ([]quota.Bucket, error) {
				if ten.ID == "vip" { // a rule of its own
					return []quota.Bucket{{Name: class, Quota: quota.Quota{Capacity: 5, RefillPerSecond: 0.001}}}, nil
				}
				return tiers.Buckets(ctx, ten, class)
			}), nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if given != svc.Resolver {
		t.Error("the function was not given the file's resolver")
	}
	if got := admitted(t, svc, "vip", 7); got != 5 {
		t.Errorf("vip: admitted %d of 7, want its own rule's 5", got)
	}
	if got := admitted(t, svc, "t1", 5); got != 3 {
		t.Errorf("t1: admitted %d of 5, want the file's 3", got)
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	good := newTierFile(t, tierFile(2, ""))
	url := config.WithRedisURL(redistest.URL(t))
	cfg, err := config.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		open func() (*config.Service, error)
		want string
	}{
		{"no Redis", func() (*config.Service, error) { return config.Open(t.Context(), good) }, "no Redis: give WithRedisURL or WithRedisClient"},
		{"two Redis", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithRedisClient(redistest.Client(t)))
		}, "config.WithRedisURL: and WithRedisClient both given"},
		{"empty URL", func() (*config.Service, error) { return config.Open(t.Context(), good, config.WithRedisURL("")) }, "config.WithRedisURL: empty URL"},
		{"nil client", func() (*config.Service, error) { return config.Open(t.Context(), good, config.WithRedisClient(nil)) }, "config.WithRedisClient: nil client"},
		{"nil logger", func() (*config.Service, error) { return config.Open(t.Context(), good, url, config.WithLogger(nil)) }, "config.WithLogger: nil logger"},
		{"ping timeout", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithPingTimeout(0))
		}, "config.WithPingTimeout: must be positive, got 0s"},
		{"bad URL", func() (*config.Service, error) {
			return config.Open(t.Context(), good, config.WithRedisURL("redis+sentinel://:s3cret@127.0.0.1:26379"))
		}, "Redis URL redis+sentinel://:xxxxx@127.0.0.1:26379: no master name"},
		{"bad limiter option", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithLimiterOptions(core.WithTimeout(-time.Second)))
		}, "limiter: tollgate: WithTimeout: timeout must be positive"},
		{"empty path", func() (*config.Service, error) { return config.Open(t.Context(), "", url) }, "config.Open: empty configuration path"},
		{"missing file", func() (*config.Service, error) {
			return config.Open(t.Context(), filepath.Join(t.TempDir(), "none.yaml"), url)
		}, "no such file"},
		{"invalid file", func() (*config.Service, error) {
			return config.Open(t.Context(), newTierFile(t, tierFile(2, "shadow_classes: [exprot]\n")), url)
		}, `tiers.yaml:10: shadow_classes[0]: class "exprot" is not defined in any tier`},
		{"watch without a file", func() (*config.Service, error) {
			return config.OpenConfig(t.Context(), cfg, url, config.WithWatch())
		}, "config.WithWatch: OpenConfig has no file to watch"},
		{"nil configuration", func() (*config.Service, error) { return config.OpenConfig(t.Context(), nil, url) }, "config.OpenConfig: nil configuration"},
		{"nil limiter resolver function", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithLimiterResolver(nil))
		}, "config.WithLimiterResolver: nil function"},
		{"nil limiter resolver", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithLimiterResolver(func(*quota.TieredResolver) (quota.Resolver, error) { return nil, nil }))
		}, "config.WithLimiterResolver: the function returned a nil resolver"},
		{"limiter resolver fails", func() (*config.Service, error) {
			return config.Open(t.Context(), good, url, config.WithLimiterResolver(func(*quota.TieredResolver) (quota.Resolver, error) {
				return nil, fmt.Errorf("%w: rules.yaml:3: bad rule", core.ErrInvalidConfig)
			}))
		}, "rules.yaml:3: bad rule"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc, err := c.open()
			if err == nil {
				_ = svc.Close()
				t.Fatal("opened")
			}
			if svc != nil {
				t.Error("a Service returned with an error")
			}
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want an ErrInvalidConfig containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestOpenFailsOnASilentRedis: a Redis that never answers fails Open
// within the ping timeout, naming where it is.
func TestOpenFailsOnASilentRedis(t *testing.T) {
	proxy := redistest.NewFaultProxy(t, strings.TrimPrefix(strings.TrimSuffix(redistest.URL(t), "/0"), "redis://"))
	proxy.Set(redistest.Blackhole)
	const ping = 300 * time.Millisecond
	start := time.Now()
	svc, err := config.Open(t.Context(), newTierFile(t, tierFile(2, "")),
		config.WithRedisURL(proxy.URL()+"?dial_timeout=100ms&read_timeout=100ms"), config.WithPingTimeout(ping))
	if err == nil {
		_ = svc.Close()
		t.Fatal("Open succeeded on a Redis that answers nothing")
	}
	if !strings.Contains(err.Error(), "cannot reach Redis at "+proxy.URL()) {
		t.Errorf("error %q does not name the Redis", err)
	}
	// a bound, not a timing claim: far beyond the ping timeout means unbounded
	if el := time.Since(start); el > ping+30*time.Second {
		t.Errorf("Open took %v with a %v ping timeout", el, ping)
	}
}

// TestOpenAppliesTheFilesDeploymentSettings: what the file says about the
// deployment reaches the limiter Open builds.
func TestOpenAppliesTheFilesDeploymentSettings(t *testing.T) {
	upstream := strings.TrimPrefix(strings.TrimSuffix(redistest.URL(t), "/0"), "redis://")
	proxy := redistest.NewFaultProxy(t, upstream)
	path := newTierFile(t, tierFile(3, `shadow_classes: [export]
deny_cache: true
local_fallback: 0.5
breaker: {threshold: 0}
failure_policy: closed
timeout: 2s
`))
	svc, err := config.Open(t.Context(), path, config.WithRedisURL(proxy.URL()),
		config.WithLimiterOptions(core.WithPrefix(redistest.Prefix(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx := t.Context()
	ten := quota.Tenant{ID: "t1"}

	// shadow_classes: export's denials are let through as shadow denials
	for range 5 {
		_, _ = svc.Limiter.Allow(ctx, ten, "export", 1)
	}
	d, err := svc.Limiter.Allow(ctx, ten, "export", 1)
	if err != nil || !d.Allowed || d.Reason != core.ReasonShadowDenied {
		t.Errorf("export over its limit: %+v, %v; want allowed as a shadow denial", d, err)
	}
	// while default is enforced, and deny_cache answers its repeat denial locally
	if got := admitted(t, svc, "t1", 4); got != 3 {
		t.Errorf("default: admitted %d of 4 on a bucket of 3", got)
	}
	d, err = svc.Limiter.Allow(ctx, ten, quota.DefaultClass, 1)
	if err != nil || d.Allowed || !d.Local {
		t.Errorf("a repeat denial with deny_cache: %+v, %v; want denied locally", d, err)
	}
	// local_fallback: with Redis gone, a fresh tenant is answered from local
	// buckets at half its quota rather than by the closed failure policy
	proxy.Set(redistest.Reset)
	var fallback, allowed int
	for range 3 {
		d, _ := svc.Limiter.Allow(ctx, quota.Tenant{ID: "t2"}, quota.DefaultClass, 1)
		if d.Fallback {
			fallback++
		}
		if d.Allowed {
			allowed++
		}
	}
	if fallback != 3 || allowed != 1 {
		t.Errorf("with Redis resetting: %d of 3 from the fallback, %d allowed; want 3 and 1 (half of 3, at least 1)", fallback, allowed)
	}
}

// TestOpenedServiceReloads runs an HTTP service built by Open under
// traffic: a changed file is applied, a bad one (invalid; valid but
// dropping a class a running route names; a small file of aliases standing
// for millions of nodes) is refused with the previous quotas serving, and
// no request is answered 5xx throughout.
func TestOpenedServiceReloads(t *testing.T) {
	path := newTierFile(t, tierFile(3, ""))
	type outcome struct {
		cfg *config.Config
		err error
	}
	reloads := make(chan outcome, 16)
	svc, err := config.Open(t.Context(), path, config.WithRedisURL(redistest.URL(t)),
		config.WithLimiterOptions(core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(2*time.Second)),
		config.WithWatch(config.WithPollInterval(10*time.Millisecond), config.WithOnReload(func(c *config.Config, err error) {
			reloads <- outcome{c, err}
		})))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()

	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	mux.HandleFunc("GET /v1/profile", ok)
	mux.HandleFunc("GET /healthz", ok)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		ctx := r.Context()
		if id := r.Header.Get("X-Test-Tenant"); id != "" { // a test's stand-in for verified auth
			ctx = gate.ContextWithTenant(ctx, quota.Tenant{ID: id})
		}
		method, pat, _ := strings.Cut(pattern, " ")
		v := svc.Gate.Decide(ctx, gate.Endpoint{Method: method, Pattern: pat})
		if !v.Proceed {
			w.WriteHeader(v.Status)
			return
		}
		mux.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	get := func(tenant string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/profile", nil)
		req.Header.Set("X-Test-Tenant", tenant)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Errorf("GET: %v", err)
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	admittedHTTP := func(tenant string, n int) int {
		got := 0
		for range n {
			if get(tenant) == http.StatusOK {
				got++
			}
		}
		return got
	}

	// background traffic, every answer checked for 5xx
	var fivexx, total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code := get(fmt.Sprintf("bg-%d-%d", w, i%50))
				total.Add(1)
				if code >= 500 || code == 0 {
					fivexx.Add(1)
				}
			}
		})
	}

	// every wait is bounded; the bound is generous for a loaded machine,
	// 1000 poll intervals
	const within = 10 * time.Second
	next := func(what string) outcome {
		t.Helper()
		select {
		case o := <-reloads:
			return o
		case <-time.After(within):
			t.Fatalf("no reload attempt within %v after %s", within, what)
			return outcome{}
		}
	}

	if got := admittedHTTP("a", 5); got != 3 {
		t.Errorf("first file: admitted %d of 5 on a bucket of 3", got)
	}

	testkit.ReplaceFile(t, path, tierFile(7, ""))
	if o := next("a larger bucket"); o.err != nil || o.cfg == nil {
		t.Fatalf("a valid file was refused: %v", o.err)
	}
	if got := admittedHTTP("b", 9); got != 7 {
		t.Errorf("after reload: admitted %d of 9 on a bucket of 7", got)
	}

	bad := []struct{ name, content, want string }{
		{"invalid", tierFile(0, ""), "capacity: must be > 0, got 0"},
		// valid on its own, but the running route GET /v1/profile names
		// class default, which it drops
		{"class-dropping", `default_tier: free
tiers:
  free:
    classes:
      export: {capacity: 5, refill_per_second: 0.001}
`, `class "default" is not defined, but route GET /v1/profile of the running configuration names it`},
		{"alias bomb", aliasBomb(134 << 10), "aliases expand the file to more than 1048576 YAML nodes"},
	}
	for i, b := range bad {
		testkit.ReplaceFile(t, path, b.content)
		o := next(b.name)
		if o.err == nil || !strings.Contains(o.err.Error(), b.want) {
			t.Fatalf("%s file: reload error %v, want %q", b.name, o.err, b.want)
		}
		if got := admittedHTTP(fmt.Sprintf("c%d", i), 9); got != 7 {
			t.Errorf("after the %s file was refused: admitted %d of 9, want the previous file's 7", b.name, got)
		}
	}
	if applied, refused := svc.Reloader.ReloadStats(); applied != 2 || refused != int64(len(bad)) {
		t.Errorf("ReloadStats = %d applied, %d refused; want 2 and %d", applied, refused, len(bad))
	}
	if svc.Reloader.LastError() == nil {
		t.Error("LastError is nil after a refused file")
	}
	halt()
	if n := fivexx.Load(); n != 0 {
		t.Errorf("%d of %d requests answered 5xx across the reloads", n, total.Load())
	}
	if total.Load() == 0 {
		t.Error("no background traffic ran")
	}
}
