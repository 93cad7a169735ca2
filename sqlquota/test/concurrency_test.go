package sqlquota_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/sqlquota"
)

// schemaV1 is the table of SchemaVersion 1, as Migrate created it before
// the concurrency column: the upgrade is tested from it, not from a table
// the current code makes.
var schemaV1 = map[sqlquota.Dialect]string{
	sqlquota.Postgres: `CREATE TABLE %s (
    tenant_id         TEXT             NOT NULL CHECK (tenant_id <> ''),
    bucket            TEXT             NOT NULL CHECK (bucket <> ''),
    capacity          BIGINT           NOT NULL CHECK (capacity > 0 AND capacity <= 1099511627776),
    refill_per_second DOUBLE PRECISION NOT NULL CHECK (refill_per_second > 0 AND refill_per_second <= 1e12),
    expires_at        TIMESTAMPTZ      NULL,
    updated_at        TIMESTAMPTZ      NOT NULL,
    updated_by        TEXT             NOT NULL,
    reason            TEXT             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, bucket))`,
	sqlquota.SQLite: `CREATE TABLE %s (
    tenant_id         TEXT    NOT NULL CHECK (tenant_id <> ''),
    bucket            TEXT    NOT NULL CHECK (bucket <> ''),
    capacity          INTEGER NOT NULL CHECK (capacity > 0 AND capacity <= 1099511627776),
    refill_per_second REAL    NOT NULL CHECK (refill_per_second > 0 AND refill_per_second <= 1e12),
    expires_at        TEXT    NULL,
    updated_at        TEXT    NOT NULL,
    updated_by        TEXT    NOT NULL,
    reason            TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, bucket))`,
}

// TestMigrateUpgradesVersion1: a table of schema version 1 holding a row
// gains the concurrency column when several replicas run Migrate at once;
// the old row reads as before (no concurrency limit), and a new override
// with a concurrency limit is stored, listed and served.
func TestMigrateUpgradesVersion1(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		db, table := d.open(t)
		ctx := t.Context()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(schemaV1[d.dialect], table)); err != nil {
			t.Fatalf("create v1 table: %v", err)
		}
		ins := "INSERT INTO " + table + " (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, $6)"
		var updated any = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		if d.dialect == sqlquota.SQLite {
			ins = "INSERT INTO " + table + " (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
			updated = "2026-03-01T12:00:00.000000Z"
		}
		if _, err := db.ExecContext(ctx, ins, "t1", "export", 50, 5.0, updated, "alice"); err != nil {
			t.Fatalf("insert v1 row: %v", err)
		}

		clock := newFakeClock()
		s, err := sqlquota.New(db, d.dialect, sqlquota.WithTable(table), sqlquota.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		// Before the upgrade the store cannot read the table.
		if _, err := s.Get(ctx, "t1", "export"); err == nil {
			t.Fatal("Get read a version 1 table without Migrate: the test does not start from version 1")
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.Migrate(ctx) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Migrate %d of a version 1 table: %v", i, err)
			}
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate of an upgraded table must be a no-op: %v", err)
		}

		old, err := s.Get(ctx, "t1", "export")
		if err != nil {
			t.Fatalf("Get of the version 1 row: %v", err)
		}
		if want := (quota.Quota{Capacity: 50, RefillPerSecond: 5}); old.Quota != want {
			t.Fatalf("version 1 row reads as %+v, want %+v", old.Quota, want)
		}

		withSlots := quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 3}
		if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t1", Bucket: "reports", Quota: withSlots, UpdatedBy: "bob"}); err != nil {
			t.Fatalf("Set with a concurrency limit: %v", err)
		}
		got, err := s.Get(ctx, "t1", "reports")
		if err != nil || got.Quota != withSlots {
			t.Fatalf("Get = %+v, %v; want quota %+v", got.Quota, err, withSlots)
		}
		served, err := s.Overrides(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		if served["reports"] != withSlots || served["export"] != old.Quota {
			t.Fatalf("Overrides = %v, want reports %v and export %v", served, withSlots, old.Quota)
		}
		// Replacing the row without a concurrency limit clears it.
		plain := quota.Quota{Capacity: 100, RefillPerSecond: 10}
		if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t1", Bucket: "reports", Quota: plain, UpdatedBy: "bob"}); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, sqlquota.ListOptions{TenantID: "t1"})
		if err != nil || len(list) != 2 || list[1].Bucket != "reports" || list[1].Quota != plain {
			t.Fatalf("List = %+v, %v; want reports with %+v", list, err, plain)
		}

		// The database refuses a concurrency the store would not serve.
		bad := "UPDATE " + table + " SET concurrency = 0 WHERE bucket = 'export'"
		if _, err := db.ExecContext(ctx, bad); err == nil {
			t.Error("the database accepted a concurrency of 0 (NULL is none)")
		}
	})
}

func TestUpgradeSchema(t *testing.T) {
	for _, d := range []sqlquota.Dialect{sqlquota.Postgres, sqlquota.SQLite} {
		ddl, err := sqlquota.Schema(d, "")
		if err != nil {
			t.Fatal(err)
		}
		up, err := sqlquota.UpgradeSchema(d, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{ddl, up} {
			if !containsAll(s, "concurrency", "BIGINT NULL", "concurrency <= 100000") {
				t.Errorf("%v: %q does not define the nullable concurrency column", d, s)
			}
		}
	}
	if _, err := sqlquota.UpgradeSchema(sqlquota.SQLite, "a;b"); err == nil {
		t.Error("UpgradeSchema accepted a bad table name")
	}
	if sqlquota.SchemaVersion != 2 {
		t.Errorf("SchemaVersion = %d, want 2", sqlquota.SchemaVersion)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
