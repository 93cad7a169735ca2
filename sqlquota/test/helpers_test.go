package sqlquota_test

import (
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/tollgate-go/tollgate/internal/pgtest"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/sqlquota"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeClock is a settable clock shared by the store, the resolver and (in
// client-clock mode) the Lua script.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// database is a real database a test runs against: a fresh SQLite file, or
// a fresh schema in the PostgreSQL test database.
type database struct {
	name    string
	dialect sqlquota.Dialect
	open    func(t *testing.T) (db *sql.DB, table string)
}

var databases = []database{
	{"sqlite", sqlquota.SQLite, openSQLite},
	{"postgres", sqlquota.Postgres, openPostgres},
}

func forEachDatabase(t *testing.T, f func(t *testing.T, d database)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) { f(t, d) })
	}
}

func openSQLite(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "overrides.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, sqlquota.DefaultTable
}

// openPostgres returns a pool on the test database and a table in a schema
// of its own, dropped when the test ends. An unreachable server fails the
// test under CI=true and skips it otherwise.
func openPostgres(t *testing.T) (*sql.DB, string) {
	t.Helper()
	_, schema := pgtest.Schema(t, "tg_test_")
	url := pgtest.URL()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, schema + "." + sqlquota.DefaultTable
}

// newStore opens d, migrates a fresh table and returns the store.
func newStore(t *testing.T, d database, opts ...sqlquota.Option) (*sqlquota.Store, *sql.DB) {
	t.Helper()
	db, table := d.open(t)
	s, err := sqlquota.New(db, d.dialect, append([]sqlquota.Option{sqlquota.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatalf("sqlquota.New: %v", err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, db
}
