// Package apptest holds what the examples' tests share: an App on a real
// Redis (through internal/redistest) and a real SQLite file, tokens, and
// the HTTP suite every HTTP example must pass over a real connection, so
// that the four frameworks are held to the same answers.
package apptest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tollgate-go/tollgate/examples"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// Secret is the tests' HS256 secret.
const Secret = "apptest-secret-0123456789abcdef"

// New opens an App on the shared real Redis (a key prefix of its own) and
// a fresh SQLite file, closed when t ends, with the examples' tier file
// but a check timeout of suiteTimeout.
func New(t testing.TB) *app.App {
	t.Helper()
	a, err := app.Open(t.Context(), app.Config{
		Addr:        "127.0.0.1:0",
		RedisURL:    redistest.URL(t),
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "overrides.db"),
		ConfigPath:  suiteConfig(t),
		JWTSecret:   Secret,
		KeyPrefix:   redistest.Prefix(t),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("app.Open: %v", err)
	}
	t.Cleanup(a.Close)
	return a
}

// suiteTimeout is the check timeout the suites run with. The suites hold
// the examples to their quotas, overrides and headers; with the tier
// file's 100 ms, a check on a machine loaded by other test packages
// sometimes missed it and was shed (a 503 where a 200 was due). What a
// missed timeout answers is the fault suite's (core/test/faults) and the
// flood test's (examples/e2e).
const suiteTimeout = "2s"

// suiteConfig writes the examples' tier file with its timeout set to
// suiteTimeout and returns its path.
func suiteConfig(t testing.TB) string {
	t.Helper()
	cfg := bytes.Replace(examples.DefaultConfig, []byte("\ntimeout: 100ms\n"), []byte("\ntimeout: "+suiteTimeout+"\n"), 1)
	if bytes.Equal(cfg, examples.DefaultConfig) {
		t.Fatal("tollgate.yaml has no 'timeout: 100ms' line to replace")
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Tenant returns a tenant ID no other test uses.
func Tenant(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}

// Token mints a valid token for tenant on tier.
func Token(t testing.TB, tenant, tier string) string {
	t.Helper()
	tok, err := app.Mint([]byte(Secret), tenant, tier, time.Hour)
	if err != nil {
		t.Fatalf("mint: %v", err)
	}
	return tok
}

// SignedClaims is a token of claims signed with Secret.
func SignedClaims(t testing.TB, claims map[string]any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString([]byte(Secret))
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

// BadToken is a token that must be refused, and why: Detail is the fixed
// text the 401 (gRPC: the Unauthenticated message) must give, never the
// JWT parser's error.
type BadToken struct {
	Name, Authorization, Detail string
}

// BadTokens returns Authorization values every example must answer 401.
func BadTokens(t testing.TB) []BadToken {
	t.Helper()
	sign := func(method jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, c).SignedString(key)
		if err != nil {
			t.Fatalf("sign: %v", err)
		}
		return s
	}
	now := time.Now()
	valid := jwt.MapClaims{"tenant": Tenant(t), "tier": "free", "exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range valid {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	hs := jwt.SigningMethodHS256
	return []BadToken{
		{"missing", "", app.DetailNoToken},
		{"not bearer", "Basic dTpw", app.DetailNotBearer},
		{"empty bearer", "Bearer ", app.DetailNotBearer},
		{"garbage", "Bearer not.a.jwt", app.DetailInvalid},
		{"wrong secret", "Bearer " + sign(hs, []byte("another-secret-0123456789"), valid), app.DetailInvalid},
		{"expired", "Bearer " + sign(hs, []byte(Secret), with("exp", now.Add(-time.Minute).Unix())), app.DetailExpired},
		{"no expiry", "Bearer " + sign(hs, []byte(Secret), with("exp", nil)), app.DetailInvalid},
		{"alg none", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid), app.DetailInvalid},
		{"HS512", "Bearer " + sign(jwt.SigningMethodHS512, []byte(Secret), valid), app.DetailInvalid},
		{"no tenant", "Bearer " + sign(hs, []byte(Secret), with("tenant", nil)), app.DetailTenant},
		{"unknown tier", "Bearer " + sign(hs, []byte(Secret), with("tier", "platinum")), app.DetailTier},
	}
}
