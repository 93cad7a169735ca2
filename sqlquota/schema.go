package sqlquota

import (
	"context"
	"fmt"
	"strings"
)

// SchemaVersion is the version of the table layout Migrate creates.
const SchemaVersion = 1

// The table, one row per (tenant, bucket). The CHECK constraints repeat the
// rules of core.Quota.Validate that SQL can state, so a row written by hand
// is refused by the database rather than skipped at load time; the upper
// bound on the rate also rejects PostgreSQL's NaN and Infinity, which
// compare greater than every number.
const postgresSchema = `CREATE TABLE IF NOT EXISTS %s (
    tenant_id         TEXT             NOT NULL CHECK (tenant_id <> ''),
    bucket            TEXT             NOT NULL CHECK (bucket <> ''),
    capacity          BIGINT           NOT NULL CHECK (capacity > 0 AND capacity <= 1099511627776),
    refill_per_second DOUBLE PRECISION NOT NULL CHECK (refill_per_second > 0 AND refill_per_second <= 1e12),
    expires_at        TIMESTAMPTZ      NULL,
    updated_at        TIMESTAMPTZ      NOT NULL,
    updated_by        TEXT             NOT NULL,
    reason            TEXT             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, bucket)
)`

// SQLite stores times as TEXT, UTC, 'YYYY-MM-DDTHH:MM:SS.ffffffZ': fixed
// width, so string comparison is time comparison.
const sqliteSchema = `CREATE TABLE IF NOT EXISTS %s (
    tenant_id         TEXT    NOT NULL CHECK (tenant_id <> ''),
    bucket            TEXT    NOT NULL CHECK (bucket <> ''),
    capacity          INTEGER NOT NULL CHECK (capacity > 0 AND capacity <= 1099511627776),
    refill_per_second REAL    NOT NULL CHECK (refill_per_second > 0 AND refill_per_second <= 1e12),
    expires_at        TEXT    NULL,
    updated_at        TEXT    NOT NULL,
    updated_by        TEXT    NOT NULL,
    reason            TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, bucket)
)`

// Schema returns the SQL that creates the overrides table for dialect, for
// teams that run migrations with their own tool. table is DefaultTable when
// empty.
func Schema(dialect Dialect, table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table, dialect); err != nil {
		return "", err
	}
	switch dialect {
	case Postgres:
		return fmt.Sprintf(postgresSchema, table) + ";\n", nil
	case SQLite:
		return fmt.Sprintf(sqliteSchema, table) + ";\n", nil
	}
	return "", fmt.Errorf("sqlquota: unknown SQL dialect %v", dialect)
}

// Migrate creates the table if it does not exist (idempotent; safe to run at
// every start and from several replicas at once), then checks that the table
// has every column the store reads. It never alters or drops anything.
func (s *Store) Migrate(ctx context.Context) error {
	ddl, err := Schema(s.dialect, s.table)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, strings.TrimSuffix(ddl, ";\n")); err != nil {
		return fmt.Errorf("sqlquota: migrate %s: %w", s.table, err)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+columns+" FROM "+s.table+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("sqlquota: table %s exists but does not have the expected columns (%s): %w", s.table, columns, err)
	}
	return rows.Close()
}
