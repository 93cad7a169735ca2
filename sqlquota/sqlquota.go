package sqlquota

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
)

// DefaultTable is the table overrides are kept in.
const DefaultTable = "tollgate_overrides"

// Limits on the audit fields of an override.
const (
	// MaxUpdatedByLen is the longest updated_by accepted, in bytes.
	MaxUpdatedByLen = 256
	// MaxReasonLen is the longest reason accepted, in bytes.
	MaxReasonLen = 1024
)

// ErrNotFound reports that no override exists for a (tenant, bucket).
var ErrNotFound = errors.New("tollgate: override not found")

// RowError reports an override row that cannot be read: a value of the
// wrong type written by hand, such as a capacity of 1.5 or 'lots' (SQLite
// keeps any value in any column; the CHECK constraints of [Schema] stop
// only some). It is that row's error alone: [Store.Overrides] skips and
// logs the row, and [Store.List] returns every other row along with a
// RowError for each such one.
type RowError struct {
	// TenantID and Bucket name the row, as far as they could be read.
	TenantID, Bucket string
	// Err says which value is wrong.
	Err error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("sqlquota: the override of tenant %q bucket %q cannot be read: %v", keys.EscapeID(e.TenantID), keys.EscapeID(e.Bucket), e.Err)
}

// Unwrap returns e.Err.
func (e *RowError) Unwrap() error { return e.Err }

// Dialect is the SQL flavour of the database.
type Dialect uint8

// Dialects.
const (
	// Postgres is PostgreSQL (through pgx's database/sql driver, or any
	// other). Times are TIMESTAMPTZ.
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or newer (for ON CONFLICT ... DO UPDATE).
	// Times are TEXT in a fixed-width UTC form that sorts as it compares.
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// ParseDialect parses "postgres" (or "postgresql", "pgx") and "sqlite" (or
// "sqlite3").
func ParseDialect(s string) (Dialect, error) {
	switch strings.ToLower(s) {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("%w: unknown SQL dialect %q (want postgres or sqlite)", core.ErrInvalidConfig, s)
}

// Override is one row: a quota that replaces the tier default of one bucket
// of one tenant.
type Override struct {
	// TenantID is the tenant, as the limiter sees it (quota.Tenant.ID).
	TenantID string
	// Bucket is a class name, or quota.CeilingBucket ("tenant") for the
	// tenant-wide ceiling.
	Bucket string
	// Quota replaces the tier default.
	Quota quota.Quota
	// ExpiresAt, when not zero, is when the override stops applying; the
	// tier default serves again from then on.
	ExpiresAt time.Time
	// UpdatedAt is when the row was last written (set by Set).
	UpdatedAt time.Time
	// UpdatedBy says who wrote it: a person or a system. Required.
	UpdatedBy string
	// Reason says why (a ticket, a contract). Optional.
	Reason string
}

// Expired reports whether o has expired at now.
func (o Override) Expired(now time.Time) bool {
	return !o.ExpiresAt.IsZero() && !now.Before(o.ExpiresAt)
}

// Store keeps overrides in a SQL table through database/sql and implements
// [quota.Overrides]. It imports no driver: open the *sql.DB with the driver of
// your choice (pgx's stdlib for PostgreSQL, modernc.org/sqlite for SQLite)
// and say which dialect it speaks. It is safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect Dialect
	table   string
	now     func() time.Time
	log     *slog.Logger

	qOverrides, qGet, qList, qListAll, qListTenant, qListTenantAll, qUpsert, qDelete, qPurge string
}

// Option configures a Store. One given a value it cannot use makes New
// fail with an error naming it and wrapping core.ErrInvalidConfig; nil
// options are skipped.
type Option interface{ apply(*Store) error }

type optionFunc func(*Store) error

func (f optionFunc) apply(s *Store) error { return f(s) }

// WithTable sets the table name. Default DefaultTable. For PostgreSQL it may
// be schema-qualified ("tenants.tollgate_overrides"). It must be a plain
// identifier (letters, digits, '_'); New rejects others.
func WithTable(name string) Option {
	return optionFunc(func(s *Store) error { s.table = name; return nil })
}

// WithClock sets the clock that decides which overrides have expired and
// stamps updated_at. Default time.Now; nil is ignored.
func WithClock(now func() time.Time) Option {
	return setUnlessNil(now == nil, func(s *Store) { s.now = now })
}

// WithLogger sets the logger for rows that cannot be served (a bad quota
// written by hand). Default slog.Default(); nil is ignored.
func WithLogger(l *slog.Logger) Option {
	return setUnlessNil(l == nil, func(s *Store) { s.log = l })
}

// setUnlessNil returns the option that runs set, or does nothing when the
// value it sets is nil.
func setUnlessNil(isNil bool, set func(*Store)) Option {
	return optionFunc(func(s *Store) error {
		if !isNil {
			set(s)
		}
		return nil
	})
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// New returns a store over db, which speaks dialect. It makes no query; call
// [Store.Migrate] to create the table.
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", core.ErrInvalidConfig)
	}
	if dialect != Postgres && dialect != SQLite {
		return nil, fmt.Errorf("%w: unknown SQL dialect %v", core.ErrInvalidConfig, dialect)
	}
	s := &Store{db: db, dialect: dialect, table: DefaultTable, now: time.Now, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			if err := o.apply(s); err != nil {
				return nil, err
			}
		}
	}
	if err := validTable(s.table, dialect); err != nil {
		return nil, err
	}
	s.prepareQueries()
	return s, nil
}

func validTable(name string, d Dialect) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || (len(parts) == 2 && d != Postgres) {
		return fmt.Errorf("%w: table name %q: only PostgreSQL takes a schema-qualified name", core.ErrInvalidConfig, name)
	}
	for _, p := range parts {
		if !ident.MatchString(p) {
			return fmt.Errorf("%w: table name %q: want letters, digits and '_' (1 to 63, not starting with a digit)", core.ErrInvalidConfig, name)
		}
	}
	return nil
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// Table returns the store's table name.
func (s *Store) Table() string { return s.table }

const columns = "tenant_id, bucket, capacity, refill_per_second, expires_at, updated_at, updated_by, reason, concurrency"

func (s *Store) prepareQueries() {
	t := s.table
	s.qOverrides = "SELECT bucket, capacity, refill_per_second, concurrency FROM " + t +
		" WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)"
	s.qGet = "SELECT " + columns + " FROM " + t + " WHERE tenant_id = $1 AND bucket = $2"
	sel := "SELECT " + columns + " FROM " + t + " WHERE "
	order := " ORDER BY tenant_id, bucket LIMIT "
	s.qList = sel + "(expires_at IS NULL OR expires_at > $1)" + order + "$2"
	s.qListAll = "SELECT " + columns + " FROM " + t + order + "$1"
	s.qListTenant = sel + "tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)" + order + "$3"
	s.qListTenantAll = sel + "tenant_id = $1" + order + "$2"
	s.qUpsert = "INSERT INTO " + t + " (" + columns + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)" +
		" ON CONFLICT (tenant_id, bucket) DO UPDATE SET capacity = excluded.capacity," +
		" refill_per_second = excluded.refill_per_second, expires_at = excluded.expires_at," +
		" updated_at = excluded.updated_at, updated_by = excluded.updated_by, reason = excluded.reason," +
		" concurrency = excluded.concurrency"
	s.qDelete = "DELETE FROM " + t + " WHERE tenant_id = $1 AND bucket = $2"
	s.qPurge = "DELETE FROM " + t + " WHERE expires_at IS NOT NULL AND expires_at <= $1"
	if s.dialect == SQLite {
		// SQLite reads $1 as a parameter named "$1", numbered by first
		// appearance; ?1 is its positional form.
		for _, q := range []*string{&s.qOverrides, &s.qGet, &s.qList, &s.qListAll, &s.qListTenant, &s.qListTenantAll, &s.qUpsert, &s.qDelete, &s.qPurge} {
			*q = strings.ReplaceAll(*q, "$", "?")
		}
	}
}

// sqliteTime is the TEXT form of times in SQLite: UTC, fixed width, so that
// comparing the strings compares the times.
const sqliteTime = "2006-01-02T15:04:05.000000Z"

// timeArg converts t for a query parameter; the zero time is NULL.
func (s *Store) timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	t = t.UTC().Truncate(time.Microsecond)
	if s.dialect == SQLite {
		return t.Format(sqliteTime)
	}
	return t
}

// scanTime reads a nullable time column written by either dialect.
type scanTime struct{ t *time.Time }

func (st scanTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*st.t = time.Time{}
	case time.Time:
		*st.t = v.UTC()
	case string:
		return st.parse(v)
	case []byte:
		return st.parse(string(v))
	default:
		return fmt.Errorf("cannot read %T as a time", src)
	}
	return nil
}

// pastInfinity is PostgreSQL's '-infinity' read as a time: the earliest
// one that is not the zero time (which means "never expires").
var pastInfinity = time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC)

func (st scanTime) parse(v string) error {
	// PostgreSQL's special timestamps, as the pgx driver gives them: a
	// row that expires at 'infinity' never expires (services apply it, as
	// expires_at > now holds), one at '-infinity' always has
	switch v {
	case "infinity":
		*st.t = time.Time{}
		return nil
	case "-infinity":
		*st.t = pastInfinity
		return nil
	}
	for _, layout := range []string{sqliteTime, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, v); err == nil {
			*st.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("cannot parse time %q", v)
}

// checkTenant reports whether id can be stored: TEXT columns hold valid
// UTF-8 without NUL (PostgreSQL refuses anything else).
func checkTenant(id string) error {
	if err := keys.ValidateTenantID(id); err != nil {
		return err
	}
	if !storable(id) {
		return fmt.Errorf("%w: tenant ID %q is not valid UTF-8 text without NUL bytes, so it cannot have overrides", core.ErrInvalidRequest, keys.EscapeID(id))
	}
	return nil
}

func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Validate reports the first thing wrong with o as Set would store it at now.
func (o Override) Validate(now time.Time) error {
	if err := checkTenant(o.TenantID); err != nil {
		return err
	}
	if err := quota.ValidateName(o.Bucket); err != nil {
		return err
	}
	if err := o.Quota.Validate(); err != nil {
		return err
	}
	if !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(now) {
		return fmt.Errorf("%w: expires_at %s is not in the future", core.ErrInvalidRequest, o.ExpiresAt.UTC().Format(time.RFC3339))
	}
	switch {
	case strings.TrimSpace(o.UpdatedBy) == "":
		return fmt.Errorf("%w: updated_by is required: say who makes the change", core.ErrInvalidRequest)
	case len(o.UpdatedBy) > MaxUpdatedByLen || !storable(o.UpdatedBy):
		return fmt.Errorf("%w: updated_by must be UTF-8 text of at most %d bytes", core.ErrInvalidRequest, MaxUpdatedByLen)
	case len(o.Reason) > MaxReasonLen || !storable(o.Reason):
		return fmt.Errorf("%w: reason must be UTF-8 text of at most %d bytes", core.ErrInvalidRequest, MaxReasonLen)
	}
	return nil
}

// Overrides implements [quota.Overrides]: the unexpired overrides of
// tenantID, by bucket. A row that cannot be read (a [RowError]) or whose
// quota is not valid (both written by hand) is skipped and logged as a
// warning naming the tenant and bucket; the tenant's other rows apply. A
// tenant ID that cannot be stored has no overrides.
func (s *Store) Overrides(ctx context.Context, tenantID string) (map[string]quota.Quota, error) {
	out := map[string]quota.Quota{}
	if checkTenant(tenantID) != nil {
		return out, nil
	}
	rows, err := s.db.QueryContext(ctx, s.qOverrides, tenantID, s.timeArg(s.now()))
	if err != nil {
		return nil, fmt.Errorf("sqlquota: load overrides: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cells [4]any
		if err := rows.Scan(&cells[0], &cells[1], &cells[2], &cells[3]); err != nil {
			return nil, fmt.Errorf("sqlquota: load overrides: %w", err)
		}
		var bucket string
		var q quota.Quota
		err := errors.Join(readText(cells[0], "bucket", &bucket), readInt(cells[1], "capacity", &q.Capacity),
			readFloat(cells[2], "refill_per_second", &q.RefillPerSecond), readNullInt(cells[3], "concurrency", &q.Concurrency))
		if err != nil {
			s.log.Warn("tollgate: skipping an override row that cannot be read",
				"table", s.table, "tenant", keys.EscapeID(tenantID), "bucket", keys.EscapeID(bucket), "err", err)
			continue
		}
		if err := q.Validate(); err != nil {
			s.log.Warn("tollgate: skipping an override that cannot be enforced",
				"table", s.table, "tenant", keys.EscapeID(tenantID), "bucket", keys.EscapeID(bucket), "err", err)
			continue
		}
		out[bucket] = q
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlquota: load overrides: %w", err)
	}
	return out, nil
}

// Set writes o (insert or replace), stamping UpdatedAt with the store's
// clock, and returns the row as stored. It validates o first; the error then
// wraps core.ErrInvalidRequest or quota.ErrInvalid.
func (s *Store) Set(ctx context.Context, o Override) (Override, error) {
	now := s.now()
	if err := o.Validate(now); err != nil {
		return Override{}, err
	}
	o.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	if !o.ExpiresAt.IsZero() {
		o.ExpiresAt = o.ExpiresAt.UTC().Truncate(time.Microsecond)
	}
	_, err := s.db.ExecContext(ctx, s.qUpsert, o.TenantID, o.Bucket, o.Quota.Capacity, o.Quota.RefillPerSecond,
		s.timeArg(o.ExpiresAt), s.timeArg(o.UpdatedAt), o.UpdatedBy, o.Reason, concurrencyArg(o.Quota.Concurrency))
	if err != nil {
		return Override{}, fmt.Errorf("sqlquota: set override: %w", err)
	}
	return o, nil
}

// Get returns the override of (tenantID, bucket), expired or not, or an
// error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, tenantID, bucket string) (Override, error) {
	if err := checkTenant(tenantID); err != nil {
		return Override{}, err
	}
	rows, err := s.db.QueryContext(ctx, s.qGet, tenantID, bucket)
	if err != nil {
		return Override{}, fmt.Errorf("sqlquota: get override: %w", err)
	}
	list, bad, err := scanAll(rows)
	if err != nil {
		return Override{}, fmt.Errorf("sqlquota: get override: %w", err)
	}
	if len(bad) > 0 {
		return Override{}, bad[0]
	}
	if len(list) == 0 {
		return Override{}, fmt.Errorf("%w: tenant %q bucket %q", ErrNotFound, keys.EscapeID(tenantID), keys.EscapeID(bucket))
	}
	return list[0], nil
}

// ListOptions selects the overrides List returns.
type ListOptions struct {
	// TenantID, when not empty, lists only that tenant's overrides.
	TenantID string
	// IncludeExpired lists expired rows too.
	IncludeExpired bool
	// Limit caps the number of rows; <= 0 means 1000.
	Limit int
}

// List returns overrides ordered by tenant and bucket. Rows that cannot be
// read do not fail the listing: List returns every other row, and an error
// joining (errors.Join) one *[RowError] per such row; errors.As finds the
// first. Any other error returns no rows.
func (s *Store) List(ctx context.Context, opt ListOptions) ([]Override, error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = 1000
	}
	var rows *sql.Rows
	var err error
	now := s.timeArg(s.now())
	switch {
	case opt.TenantID != "":
		if err := checkTenant(opt.TenantID); err != nil {
			return nil, err
		}
		if opt.IncludeExpired {
			rows, err = s.db.QueryContext(ctx, s.qListTenantAll, opt.TenantID, limit)
		} else {
			rows, err = s.db.QueryContext(ctx, s.qListTenant, opt.TenantID, now, limit)
		}
	case opt.IncludeExpired:
		rows, err = s.db.QueryContext(ctx, s.qListAll, limit)
	default:
		rows, err = s.db.QueryContext(ctx, s.qList, now, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlquota: list overrides: %w", err)
	}
	list, bad, err := scanAll(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlquota: list overrides: %w", err)
	}
	return list, errors.Join(bad...)
}

// scanAll reads rows of every column: the rows it could read, a *RowError
// for each one it could not, and the query's own error.
func scanAll(rows *sql.Rows) (out []Override, bad []error, err error) {
	defer rows.Close()
	for rows.Next() {
		var c [9]any
		if err := rows.Scan(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8]); err != nil {
			return nil, nil, err
		}
		var o Override
		var reason sql.NullString
		rerr := errors.Join(readText(c[0], "tenant_id", &o.TenantID), readText(c[1], "bucket", &o.Bucket),
			readInt(c[2], "capacity", &o.Quota.Capacity), readFloat(c[3], "refill_per_second", &o.Quota.RefillPerSecond),
			cellErr("expires_at", c[4], scanTime{&o.ExpiresAt}.Scan(c[4])),
			cellErr("updated_at", c[5], scanTime{&o.UpdatedAt}.Scan(c[5])),
			readText(c[6], "updated_by", &o.UpdatedBy), cellErr("reason", c[7], reason.Scan(c[7])),
			readNullInt(c[8], "concurrency", &o.Quota.Concurrency))
		if rerr != nil {
			bad = append(bad, &RowError{TenantID: o.TenantID, Bucket: o.Bucket, Err: rerr})
			continue
		}
		o.Reason = reason.String
		out = append(out, o)
	}
	return out, bad, rows.Err()
}

// The columns are scanned as the driver gives them and read into their Go
// types one by one, so that a value of the wrong type is its row's error,
// not the query's. The conversions are database/sql's own.

// readCell reads a non-NULL cell of column into dst, as database/sql
// converts it; want says what the column holds, for the error.
func readCell[T any](v any, column, want string, dst *T) error {
	var n sql.Null[T]
	if err := n.Scan(v); err != nil || !n.Valid {
		return cellErr(column, v, errors.New(want))
	}
	*dst = n.V
	return nil
}

func readText(v any, column string, dst *string) error { return readCell(v, column, "not text", dst) }

func readInt(v any, column string, dst *int64) error {
	return readCell(v, column, "not an integer", dst)
}

// readNullInt reads a nullable integer column: NULL is 0.
func readNullInt(v any, column string, dst *int64) error {
	if v == nil {
		*dst = 0
		return nil
	}
	return readInt(v, column, dst)
}

// concurrencyArg is the concurrency column of a quota: NULL for none, so a
// row without a concurrency limit reads as a row of schema version 1.
func concurrencyArg(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func readFloat(v any, column string, dst *float64) error {
	return readCell(v, column, "not a number", dst)
}

// cellErr names the column and shows the value err is about.
func cellErr(column string, v any, err error) error {
	if err == nil {
		return nil
	}
	var shown string
	switch x := v.(type) {
	case nil:
		shown = "NULL"
	case string:
		shown = strconv.Quote(x)
	case []byte:
		shown = strconv.Quote(string(x))
	default:
		shown = fmt.Sprint(x)
	}
	return fmt.Errorf("%s %s: %w", column, shown, err)
}

// Delete removes the override of (tenantID, bucket); the tier default
// applies again at the next cache refresh. It returns an error wrapping
// ErrNotFound when there was none.
func (s *Store) Delete(ctx context.Context, tenantID, bucket string) error {
	if err := checkTenant(tenantID); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.qDelete, tenantID, bucket)
	if err != nil {
		return fmt.Errorf("sqlquota: delete override: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlquota: delete override: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: tenant %q bucket %q", ErrNotFound, keys.EscapeID(tenantID), keys.EscapeID(bucket))
	}
	return nil
}

// PurgeExpired deletes every expired row and reports how many. Expired rows
// are never served, so purging is housekeeping, not a correctness step.
func (s *Store) PurgeExpired(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.qPurge, s.timeArg(s.now()))
	if err != nil {
		return 0, fmt.Errorf("sqlquota: purge expired overrides: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlquota: purge expired overrides: %w", err)
	}
	return n, nil
}
