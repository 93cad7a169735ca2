package app_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/httplimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFromEnv(t *testing.T) {
	env := map[string]string{"REDIS_URL": "redis://r:6379/0", "DATABASE_URL": "sqlite:///x.db", "TOLLGATE_CONFIG": "c.yaml", "TOLLGATE_JWT_SECRET": "s"}
	c := app.FromEnv("gin", func(k string) string { return env[k] })
	if c.Addr != app.DefaultAddr("gin") || c.RedisURL != env["REDIS_URL"] || c.DatabaseURL != env["DATABASE_URL"] || c.ConfigPath != "c.yaml" || c.JWTSecret != "s" {
		t.Errorf("FromEnv = %+v", c)
	}
}

// Each example listens on a port of its own unless ADDR says otherwise,
// none of them one tollgate-rls or the gRPC example's metrics take, so that
// several run side by side.
func TestDefaultAddrsAreDistinct(t *testing.T) {
	taken := map[string]string{"127.0.0.1:8081": "tollgate-rls", "127.0.0.1:9464": "tollgate-rls metrics"}
	for _, name := range []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3", "grpc", "connect"} {
		addr := app.FromEnv(name, func(string) string { return "" }).Addr
		if addr != app.DefaultAddr(name) || app.DefaultAddrs[name] != addr {
			t.Errorf("%s: FromEnv listens on %q, DefaultAddr %q, DefaultAddrs %q", name, addr, app.DefaultAddr(name), app.DefaultAddrs[name])
		}
		if other, dup := taken[addr]; dup {
			t.Errorf("%s listens on %s by default, as %s does", name, addr, other)
		}
		taken[addr] = name
		env := map[string]string{"ADDR": "127.0.0.1:1234"}
		if c := app.FromEnv(name, func(k string) string { return env[k] }); c.Addr != "127.0.0.1:1234" {
			t.Errorf("%s: ADDR ignored: %q", name, c.Addr)
		}
	}
}

// The development secret is public: a service started with it (or with no
// secret) refuses to run unless told it is a demo (TOLLGATE_DEMO=1).
func TestDevelopmentSecretOnlyForDemos(t *testing.T) {
	dir := t.TempDir()
	base := app.Config{RedisURL: redistest.URL(t), DatabaseURL: "sqlite://" + filepath.Join(dir, "o.db"), Logger: quiet()}
	for _, secret := range []string{"", app.DevSecret} {
		c := base
		c.JWTSecret = secret
		a, err := app.Open(t.Context(), c)
		if err == nil {
			a.Close()
			t.Fatalf("secret %q: opened without TOLLGATE_DEMO", secret)
		}
		if !strings.Contains(err.Error(), "TOLLGATE_DEMO=1") || !strings.Contains(err.Error(), "TOLLGATE_JWT_SECRET") {
			t.Errorf("error %q does not say what to do", err)
		}
		c.Demo = true
		a, err = app.Open(t.Context(), c)
		if err != nil {
			t.Fatalf("secret %q with TOLLGATE_DEMO: %v", secret, err)
		}
		a.Close()
	}
	env := map[string]string{"TOLLGATE_DEMO": "1"}
	if c := app.FromEnv("gin", func(k string) string { return env[k] }); !c.Demo {
		t.Error("FromEnv ignores TOLLGATE_DEMO=1")
	}
}

func TestOpenRejectsBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\ntiers: {free: {classes: {default: {capacity: -1, refill_per_second: 1}}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := app.Config{RedisURL: redistest.URL(t), DatabaseURL: "sqlite://" + filepath.Join(dir, "o.db"), JWTSecret: apptest.Secret, Logger: quiet()}
	for _, c := range []struct {
		name, want string
		edit       func(*app.Config)
	}{
		{"bad REDIS_URL", "REDIS_URL", func(c *app.Config) { c.RedisURL = "http://nope" }},
		{"unreachable Redis", "cannot reach Redis", func(c *app.Config) { c.RedisURL = "redis://127.0.0.1:1/0" }},
		{"DATABASE_URL scheme", "unsupported scheme", func(c *app.Config) { c.DatabaseURL = "mysql://x" }},
		{"DATABASE_URL sqlite without path", "sqlite://path", func(c *app.Config) { c.DatabaseURL = "sqlite://" }},
		{"missing config file", "TOLLGATE_CONFIG", func(c *app.Config) { c.ConfigPath = filepath.Join(dir, "missing.yaml") }},
		{"invalid config file", "capacity", func(c *app.Config) { c.ConfigPath = bad }},
		{"short secret", "TOLLGATE_JWT_SECRET", func(c *app.Config) { c.JWTSecret = "short" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.edit(&cfg)
			a, err := app.Open(t.Context(), cfg)
			if err == nil {
				a.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestVerifier(t *testing.T) {
	v, err := app.NewVerifier([]byte(apptest.Secret), func(tier string) bool { return tier == "free" || tier == "" })
	if err != nil {
		t.Fatal(err)
	}
	tok, err := app.Mint([]byte(apptest.Secret), "t42", "free", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, "  Bearer   " + tok + " "} {
		if got, err := v.Authenticate(h); err != nil || got != (quota.Tenant{ID: "t42", Tier: "free"}) {
			t.Errorf("Authenticate(%q) = %+v, %v", h, got, err)
		}
	}
	var log bytes.Buffer
	v.SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	for _, bad := range apptest.BadTokens(t) {
		_, err := v.Authenticate(bad.Authorization)
		if !errors.Is(err, app.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", bad.Name, err)
		}
		if got := app.Detail(err); got != bad.Detail {
			t.Errorf("%s: Detail %q, want %q", bad.Name, got, bad.Detail)
		}
	}
	// the parser's own words are in the log, never in a detail
	for _, want := range []string{"token is expired", "signature is invalid", "exp claim is required"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log.String())
		}
	}
	// a token is accepted for ExpiryLeeway after its exp, and not after
	for _, c := range []struct {
		expired time.Duration
		ok      bool
	}{{app.ExpiryLeeway - 2*time.Second, true}, {app.ExpiryLeeway + 2*time.Second, false}} {
		tok := apptest.SignedClaims(t, map[string]any{"tenant": "t42", "tier": "free", "exp": time.Now().Add(-c.expired).Unix()})
		if _, err := v.Authenticate("Bearer " + tok); (err == nil) != c.ok {
			t.Errorf("a token expired %v ago: %v, want accepted %v", c.expired, err, c.ok)
		}
	}
	if _, err := app.Mint([]byte("short"), "t", "free", time.Minute); err == nil {
		t.Error("Mint accepted a short secret")
	}
	if _, err := app.Mint([]byte(apptest.Secret), "", "free", time.Minute); err == nil {
		t.Error("Mint accepted an empty tenant")
	}
}

// A TOLLGATE_CONFIG file replaces the built-in one: its routes and header
// style reach the adapter through File.GateOptions, and a change to its
// tiers applies without a restart.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tollgate.yaml")
	write := func(profileCapacity int) {
		t.Helper()
		y := "version: 1\ndefault_tier: free\nheader_style: x-ratelimit\ntiers:\n  free:\n    classes:\n" +
			"      default: {capacity: " + strconv.Itoa(profileCapacity) + ", refill_per_second: 1}\n" +
			"      export: {capacity: 30, refill_per_second: 1}\n" +
			"routes:\n  - {method: POST, path: /v1/reports/export, class: export, cost: 10}\n"
		testkit.ReplaceFile(t, path, y)
	}
	write(7)
	a, err := app.Open(t.Context(), app.Config{RedisURL: redistest.URL(t), DatabaseURL: "sqlite://" + filepath.Join(dir, "o.db"),
		ConfigPath: path, JWTSecret: apptest.Secret, KeyPrefix: redistest.Prefix(t), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.File.Source != path || !strings.Contains(a.Describe(), path) {
		t.Errorf("File.Source %q, Describe %q: want the file", a.File.Source, a.Describe())
	}
	limit := httplimit.Middleware(a.Gate)
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux.Handle("POST "+app.PathExport, a.Auth.RequireTenant(limit(ok)))
	mux.Handle("GET "+app.PathProfile, a.Auth.RequireTenant(limit(ok)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")

	r := apptest.Do(t, http.MethodPost, srv.URL+app.PathExport, auth)
	if r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Limit") != "30" || r.Header.Get("X-RateLimit-Remaining") != "20" {
		t.Errorf("export: status %d, limit %q, remaining %q; want 200, 30 and 20 (class export, cost 10 from the file)",
			r.Status, r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"))
	}
	if r.Header.Get("RateLimit") != "" {
		t.Errorf("RateLimit header %q sent; the file's header_style is x-ratelimit only", r.Header.Get("RateLimit"))
	}
	// A route the file does not name is the default route: class default, cost 1.
	r = apptest.Do(t, http.MethodGet, srv.URL+app.PathProfile, auth)
	if r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Limit") != "7" || r.Header.Get("X-RateLimit-Remaining") != "6" {
		t.Errorf("profile: status %d, limit %q, remaining %q; want 200, 7 and 6", r.Status, r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"))
	}
	if got := a.Resolver.Tiers().Tiers["free"].Classes["default"].Capacity; got != 7 {
		t.Fatalf("default capacity %d, want 7 from the file", got)
	}
	write(9)
	deadline := time.Now().Add(10 * time.Second)
	for a.Resolver.Tiers().Tiers["free"].Classes["default"].Capacity != 9 {
		if time.Now().After(deadline) {
			t.Fatal("the changed file was not applied within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLimiterErrorLogsOncePerSecond: a flood of errors from an adapter's
// hook (every shed check reports one) is one log line a second, not one a
// check.
func TestLimiterErrorLogsOncePerSecond(t *testing.T) {
	var buf bytes.Buffer
	a := &app.App{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	for range 1000 {
		a.LimiterError("/v1/profile", core.ErrOverloaded)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("1000 errors in well under a second logged %d lines, want 1:\n%s", n, buf.String())
	}
}
