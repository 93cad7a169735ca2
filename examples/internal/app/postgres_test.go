package app_test

import (
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/httplimit"
	"github.com/tollgate-go/tollgate/internal/pgtest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// postgresSchema creates a schema of the test's own on the test database,
// dropped when the test ends, and returns an admin pool and a DATABASE_URL
// whose search_path is that schema, so that the service's override table
// lands there and never touches another test's rows. An unreachable server
// fails the test under CI=true and skips it otherwise.
func postgresSchema(t *testing.T) (admin *sql.DB, schema, databaseURL string) {
	t.Helper()
	admin, schema = pgtest.Schema(t, "tg_app_test_")
	base := pgtest.URL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends it as a run-time parameter
	u.RawQuery = q.Encode()
	return admin, schema, u.String()
}

// DATABASE_URL=postgres://...: the service creates its override table in
// PostgreSQL, and an override written there by hand (as an operator would,
// with psql) is applied to the next request of that tenant.
func TestPostgresOverrideAppliesToARequest(t *testing.T) {
	admin, schema, dbURL := postgresSchema(t)
	a, err := app.Open(t.Context(), app.Config{RedisURL: redistest.URL(t), DatabaseURL: dbURL,
		JWTSecret: apptest.Secret, KeyPrefix: redistest.Prefix(t), Logger: quiet()})
	if err != nil {
		t.Fatalf("app.Open with DATABASE_URL=%s: %v", dbURL, err)
	}
	defer a.Close()
	if !strings.HasPrefix(a.Database, "postgres://") || !strings.Contains(a.Describe(), "overrides: postgres://") {
		t.Errorf("Database = %q, Describe = %q: want the PostgreSQL URL", a.Database, a.Describe())
	}

	// The table Migrate made at start-up is in this test's schema.
	table := schema + ".tollgate_overrides"
	tenant := apptest.Tenant(t)
	if _, err := admin.ExecContext(t.Context(), "INSERT INTO "+table+
		" (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by, reason) VALUES ($1, $2, 15, 0.1, now(), 'app-test', 'trial')",
		tenant, app.ClassExport); err != nil {
		t.Fatalf("insert the override into %s: %v", table, err)
	}

	limit := httplimit.Middleware(a.Gate)
	mux := http.NewServeMux() // the route table is keyed by the mux's pattern
	mux.Handle("POST "+app.PathExport, a.Auth.RequireTenant(limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The free tier's export bucket is 10 (two exports of 5); the override
	// makes it 15: three exports, then 429.
	auth := "Bearer " + apptest.Token(t, tenant, "free")
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		r := apptest.Do(t, http.MethodPost, srv.URL+app.PathExport, auth)
		if r.Status != want || r.Header.Get("X-RateLimit-Limit") != "15" || r.Header.Get("RateLimit-Policy") != `"export";q=15;w=150` {
			t.Fatalf("export #%d: status %d, X-RateLimit-Limit %q, RateLimit-Policy %q; want %d, 15 and the export policy (the override in PostgreSQL)",
				i+1, r.Status, r.Header.Get("X-RateLimit-Limit"), r.Header.Get("RateLimit-Policy"), want)
		}
	}
	// Another tenant on the same tier keeps the tier default.
	other := "Bearer " + apptest.Token(t, apptest.Tenant(t), "free")
	if r := apptest.Do(t, http.MethodPost, srv.URL+app.PathExport, other); r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("another tenant: status %d, X-RateLimit-Limit %q; want 200 and the tier's 10", r.Status, r.Header.Get("X-RateLimit-Limit"))
	}

	// And the store reads back what is in PostgreSQL.
	o, err := a.Overrides.Get(t.Context(), tenant, app.ClassExport)
	if err != nil || o.Quota.Capacity != 15 || o.UpdatedBy != "app-test" {
		t.Errorf("Overrides.Get = %+v, %v", o, err)
	}
}

// A PostgreSQL that does not answer is a start-up error naming
// DATABASE_URL, not a service that runs without its overrides.
func TestPostgresUnreachableFailsOpen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	a, err := app.Open(t.Context(), app.Config{RedisURL: redistest.URL(t),
		DatabaseURL: "postgres://postgres@127.0.0.1:" + strconv.Itoa(dead) + "/test?sslmode=disable&connect_timeout=2",
		JWTSecret:   apptest.Secret, Logger: quiet()})
	if err == nil {
		a.Close()
		t.Fatal("app.Open succeeded on a PostgreSQL that does not answer")
	}
	if !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("error %q does not name DATABASE_URL", err)
	}
}
