package sqlquota

import (
	"context"
	"fmt"
	"strings"
)

// SchemaVersion is the version of the table layout Migrate creates.
// Version 2 added the nullable concurrency column (NULL: no concurrency
// limit); Migrate upgrades a version 1 table in place.
const SchemaVersion = 2

// The table, one row per (tenant, bucket). The CHECK constraints repeat the
// rules of quota.Quota.Validate that SQL can state, so a row written by hand
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
    concurrency       %s,
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
    concurrency       %s,
    PRIMARY KEY (tenant_id, bucket)
)`

// concurrencyColumn is the definition of the column added in version 2, in
// the CREATE TABLE and in the ALTER TABLE that upgrades a version 1 table.
// It is nullable so that the rows of version 1 keep their meaning: NULL is
// no concurrency limit. The bound repeats quota.MaxConcurrency.
const concurrencyColumn = "BIGINT NULL CHECK (concurrency IS NULL OR (concurrency > 0 AND concurrency <= 100000))"

// Schema returns the SQL that creates the overrides table for dialect, for
// teams that run migrations with their own tool. table is DefaultTable when
// empty.
func Schema(dialect Dialect, table string) (string, error) {
	return statement(dialect, table, func(table string) (postgres, sqlite string) {
		return fmt.Sprintf(postgresSchema, table, concurrencyColumn), fmt.Sprintf(sqliteSchema, table, concurrencyColumn)
	})
}

// UpgradeSchema returns the SQL that upgrades an overrides table of version
// 1 to [SchemaVersion] for dialect, for teams that run migrations with their
// own tool: it adds the nullable concurrency column, so existing rows keep
// no concurrency limit. table is DefaultTable when empty.
func UpgradeSchema(dialect Dialect, table string) (string, error) {
	return statement(dialect, table, func(table string) (postgres, sqlite string) {
		// SQLite has no ADD COLUMN IF NOT EXISTS; Migrate checks first.
		return "ALTER TABLE " + table + " ADD COLUMN IF NOT EXISTS concurrency " + concurrencyColumn,
			"ALTER TABLE " + table + " ADD COLUMN concurrency " + concurrencyColumn
	})
}

// statement returns dialect's form of the statement forms writes for table
// (DefaultTable when empty), terminated.
func statement(dialect Dialect, table string, forms func(table string) (postgres, sqlite string)) (string, error) {
	table, err := schemaTable(dialect, table)
	if err != nil {
		return "", err
	}
	postgres, sqlite := forms(table)
	switch dialect {
	case Postgres:
		return postgres + ";\n", nil
	case SQLite:
		return sqlite + ";\n", nil
	}
	return "", fmt.Errorf("sqlquota: unknown SQL dialect %v", dialect)
}

// Migrate creates the table if it does not exist, upgrades a table of an
// earlier [SchemaVersion] by adding the columns it lacks (a version 1 table
// gains the nullable concurrency column; its rows keep no concurrency
// limit), then checks that the table has every column the store reads. It
// is idempotent and safe to run at every start and from several replicas at
// once. It never drops or rewrites anything.
func (s *Store) Migrate(ctx context.Context) error {
	ddl, err := Schema(s.dialect, s.table)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, strings.TrimSuffix(ddl, ";\n")); err != nil {
		return fmt.Errorf("sqlquota: migrate %s: %w", s.table, err)
	}
	if !s.hasColumns(ctx, "concurrency") {
		up, err := UpgradeSchema(s.dialect, s.table)
		if err != nil {
			return err
		}
		// Another replica may add the column between the check and the
		// ALTER (SQLite then says "duplicate column"): the check below is
		// what decides.
		if _, err := s.db.ExecContext(ctx, strings.TrimSuffix(up, ";\n")); err != nil && !s.hasColumns(ctx, "concurrency") {
			return fmt.Errorf("sqlquota: migrate %s to schema version %d: %w", s.table, SchemaVersion, err)
		}
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+columns+" FROM "+s.table+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("sqlquota: table %s exists but does not have the expected columns (%s): %w", s.table, columns, err)
	}
	return rows.Close()
}

// hasColumns reports whether the table has the columns cols (a
// comma-separated list), by selecting them from no row.
func (s *Store) hasColumns(ctx context.Context, cols string) bool {
	rows, err := s.db.QueryContext(ctx, "SELECT "+cols+" FROM "+s.table+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	return rows.Close() == nil
}

// schemaTable is the table Schema and UpgradeSchema write for: table, or
// DefaultTable when empty, validated for dialect.
func schemaTable(dialect Dialect, table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	return table, validTable(table, dialect)
}
