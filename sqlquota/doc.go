// Package sqlquota keeps per-tenant quota overrides in a SQL database and
// serves them to core's resolver: it implements [quota.Overrides].
//
// Each tenant gets its tier's defaults unless an override row exists for one
// of its buckets (a class, or "tenant" for the tenant-wide ceiling).
// Overrides live in the primary database beside tenant metadata, so a sales
// exception needs no deploy: [quota.TieredResolver] caches them per tenant for
// its TTL (45 s by default) and picks a change up at the next refresh. A
// bucket keeps its tokens across a change, clamped to the new capacity.
//
// # The table
//
// One row per (tenant_id, bucket); see [Schema] for the exact SQL of each
// dialect:
//
//	tenant_id          TEXT      the tenant (quota.Tenant.ID)
//	bucket             TEXT      a class name, or "tenant" for the ceiling
//	capacity           BIGINT    burst, tokens (> 0)
//	refill_per_second  DOUBLE    sustained rate (> 0)
//	expires_at         TIMESTAMP NULL: never; else the tier applies again from then
//	updated_at         TIMESTAMP when the row was written
//	updated_by         TEXT      who wrote it
//	reason             TEXT      why
//	PRIMARY KEY (tenant_id, bucket)
//
// [Store.Migrate] creates the table if it does not exist; it is idempotent.
// Expired rows are never served ([Store.Overrides] filters them with the
// store's clock); [Store.PurgeExpired] removes them.
//
// # Drivers
//
// The package uses database/sql only and imports no driver: open the
// *sql.DB with pgx's stdlib driver for PostgreSQL
// (github.com/jackc/pgx/v5/stdlib, driver "pgx") or a pure-Go SQLite
// (modernc.org/sqlite, driver "sqlite"), and pass the matching [Dialect].
//
// # Failure
//
// When the database fails, Overrides returns the error and the resolver
// keeps serving the last overrides it loaded (stale-on-error, counted in
// ResolverStats.StaleServed and logged), or the tier defaults if it never
// loaded any. A database outage never becomes a rate-limiting outage.
package sqlquota
