// Package pgtest gives a test a PostgreSQL schema of its own on the test
// database, for the test modules that store data in PostgreSQL.
//
// It opens its pools with database/sql's driver "pgx", which the test
// binary registers (import _ "github.com/jackc/pgx/v5/stdlib"), so that the
// internal module depends on no database driver.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/redistest"
)

// URL is the test database: TOLLGATE_TEST_POSTGRES, else a postgres://
// DATABASE_URL, else the machine's local server.
func URL() string {
	if u := os.Getenv("TOLLGATE_TEST_POSTGRES"); u != "" {
		return u
	}
	if u := os.Getenv("DATABASE_URL"); strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Schema creates a schema on the test database (see URL), named prefix and
// a random suffix, and drops it when t ends; it returns an admin pool on
// that database, closed when t ends, and the schema's name. An unreachable
// server fails t under CI=true and skips it otherwise.
func Schema(t testing.TB, prefix string) (admin *sql.DB, schema string) {
	t.Helper()
	base := URL()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("open postgres %s: %v", base, err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		msg := "PostgreSQL at " + base + " is unreachable (set TOLLGATE_TEST_POSTGRES, or start it: .ci/run does): " + err.Error()
		if redistest.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg + " (skipped outside CI)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = prefix + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return admin, schema
}
