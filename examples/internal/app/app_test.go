package app_test

import (
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

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFromEnv(t *testing.T) {
	env := map[string]string{"REDIS_URL": "redis://r:6379/0", "DATABASE_URL": "sqlite:///x.db", "TOLLGATE_CONFIG": "c.yaml", "TOLLGATE_JWT_SECRET": "s"}
	c := app.FromEnv(func(k string) string { return env[k] })
	if c.Addr != app.DefaultAddr || c.RedisURL != env["REDIS_URL"] || c.DatabaseURL != env["DATABASE_URL"] || c.ConfigPath != "c.yaml" || c.JWTSecret != "s" {
		t.Errorf("FromEnv = %+v", c)
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
		if got, err := v.Authenticate(h); err != nil || got != (core.Tenant{ID: "t42", Tier: "free"}) {
			t.Errorf("Authenticate(%q) = %+v, %v", h, got, err)
		}
	}
	for _, bad := range apptest.BadTokens(t) {
		if _, err := v.Authenticate(bad.Authorization); !errors.Is(err, app.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", bad.Name, err)
		}
	}
	if _, err := app.Mint([]byte("short"), "t", "free", time.Minute); err == nil {
		t.Error("Mint accepted a short secret")
	}
	if _, err := app.Mint([]byte(apptest.Secret), "", "free", time.Minute); err == nil {
		t.Error("Mint accepted an empty tenant")
	}
}

// A TOLLGATE_CONFIG file replaces the built-in tiers and routes, and a
// change to it applies without a restart.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tollgate.yaml")
	write := func(profileCapacity int) {
		t.Helper()
		y := "version: 1\ndefault_tier: free\ntiers:\n  free:\n    classes:\n" +
			"      default: {capacity: " + strconv.Itoa(profileCapacity) + ", refill_per_second: 1}\n" +
			"      export: {capacity: 30, refill_per_second: 1}\n" +
			"routes:\n  - {method: POST, path: /v1/reports/export, class: export, cost: 10}\n"
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(7)
	a, err := app.Open(t.Context(), app.Config{RedisURL: redistest.URL(t), DatabaseURL: "sqlite://" + filepath.Join(dir, "o.db"),
		ConfigPath: path, JWTSecret: apptest.Secret, KeyPrefix: redistest.Prefix(t), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	limit := a.Auth.RequireTenant(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tn, _ := core.TenantFromContext(r.Context())
		route, _ := a.CostFunc()(r.Context(), tn, core.Endpoint{Method: r.Method, Pattern: r.URL.Path})
		d, err := a.Limiter.Allow(r.Context(), tn, route.Class, route.Cost)
		if err != nil {
			t.Errorf("Allow: %v", err)
		}
		w.Header().Set("Class", route.Class)
		w.Header().Set("Limit", strconv.Itoa(int(d.Limit)))
	}))
	srv := httptest.NewServer(limit)
	defer srv.Close()
	auth := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")

	r := apptest.Do(t, http.MethodPost, srv.URL+app.PathExport, auth)
	if r.Header.Get("Class") != "export" || r.Header.Get("Limit") != "30" {
		t.Errorf("export from the file: class %q limit %q, want export 30", r.Header.Get("Class"), r.Header.Get("Limit"))
	}
	if _, ok := a.CostFunc()(t.Context(), core.Tenant{}, core.Endpoint{Method: http.MethodGet, Pattern: app.PathProfile}); ok {
		t.Error("a route the file does not name did not fall back to the built-in table")
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
