package sqlquota_test

import (
	"database/sql"
	"errors"
	"math"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/sqlquota"
)

func TestStoreCRUD(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		clock := newFakeClock()
		s, _ := newStore(t, d, sqlquota.WithClock(clock.Now))
		ctx := t.Context()
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("second Migrate must be a no-op: %v", err)
		}
		exp := clock.Now().Add(72 * time.Hour).Add(123456789 * time.Nanosecond)
		in := sqlquota.Override{TenantID: "t{42}:x", Bucket: "export", Quota: quota.Quota{Capacity: 500, RefillPerSecond: 2.5},
			ExpiresAt: exp, UpdatedBy: "alice", Reason: "JIRA-1: big import"}
		stored, err := s.Set(ctx, in)
		if err != nil {
			t.Fatalf("Set: %v", err)
		}
		got, err := s.Get(ctx, "t{42}:x", "export")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !got.ExpiresAt.Equal(exp.Truncate(time.Microsecond)) || !got.UpdatedAt.Equal(clock.Now()) {
			t.Errorf("times: expires %v (want %v), updated %v (want %v)", got.ExpiresAt, exp, got.UpdatedAt, clock.Now())
		}
		got.ExpiresAt, got.UpdatedAt, stored.ExpiresAt, stored.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, stored) {
			t.Errorf("Get = %+v, want %+v", got, stored)
		}

		// Set again: an upsert, not a second row.
		clock.Advance(time.Minute)
		if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t{42}:x", Bucket: "export", Quota: quota.Quota{Capacity: 600, RefillPerSecond: 3}, UpdatedBy: "bob"}); err != nil {
			t.Fatalf("Set again: %v", err)
		}
		if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t2", Bucket: quota.CeilingBucket, Quota: quota.PerSecond(9), UpdatedBy: "bob"}); err != nil {
			t.Fatalf("Set t2: %v", err)
		}
		list, err := s.List(ctx, sqlquota.ListOptions{})
		if err != nil || len(list) != 2 {
			t.Fatalf("List = %+v, %v; want 2 rows", list, err)
		}
		if o := list[0]; o.TenantID != "t2" && o.TenantID != "t{42}:x" {
			t.Errorf("List order: %+v", list)
		}
		got, _ = s.Get(ctx, "t{42}:x", "export")
		if got.Quota.Capacity != 600 || got.UpdatedBy != "bob" || !got.ExpiresAt.IsZero() || got.Reason != "" {
			t.Errorf("after upsert: %+v", got)
		}
		if one, err := s.List(ctx, sqlquota.ListOptions{TenantID: "t2"}); err != nil || len(one) != 1 || one[0].Bucket != quota.CeilingBucket {
			t.Errorf("List(t2) = %+v, %v", one, err)
		}
		ov, err := s.Overrides(ctx, "t{42}:x")
		if err != nil || !reflect.DeepEqual(ov, map[string]quota.Quota{"export": {Capacity: 600, RefillPerSecond: 3}}) {
			t.Errorf("Overrides = %v, %v", ov, err)
		}

		if err := s.Delete(ctx, "t{42}:x", "export"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := s.Get(ctx, "t{42}:x", "export"); !errors.Is(err, sqlquota.ErrNotFound) {
			t.Errorf("Get after Delete = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "t{42}:x", "export"); !errors.Is(err, sqlquota.ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
		if ov, err := s.Overrides(ctx, "t{42}:x"); err != nil || len(ov) != 0 {
			t.Errorf("Overrides after Delete = %v, %v", ov, err)
		}
	})
}

func TestSetRejectsBadOverrides(t *testing.T) {
	clock := newFakeClock()
	s, _ := newStore(t, databases[0], sqlquota.WithClock(clock.Now))
	good := sqlquota.Override{TenantID: "t1", Bucket: "default", Quota: quota.PerSecond(5), UpdatedBy: "ops"}
	cases := []struct {
		name string
		edit func(o *sqlquota.Override)
		is   error
		want string
	}{
		{"empty tenant", func(o *sqlquota.Override) { o.TenantID = "" }, core.ErrInvalidRequest, "tenant ID is empty"},
		{"long tenant", func(o *sqlquota.Override) { o.TenantID = strings.Repeat("x", 257) }, core.ErrInvalidRequest, "tenant ID is 257 bytes"},
		{"tenant not UTF-8", func(o *sqlquota.Override) { o.TenantID = "t\xff" }, core.ErrInvalidRequest, "not valid UTF-8"},
		{"tenant NUL", func(o *sqlquota.Override) { o.TenantID = "t\x00" }, core.ErrInvalidRequest, "without NUL"},
		{"bad bucket", func(o *sqlquota.Override) { o.Bucket = "ex port" }, core.ErrInvalidRequest, `bucket name "ex port"`},
		{"empty bucket", func(o *sqlquota.Override) { o.Bucket = "" }, core.ErrInvalidRequest, "bucket name is empty"},
		{"zero capacity", func(o *sqlquota.Override) { o.Quota.Capacity = 0 }, quota.ErrInvalid, "capacity must be > 0"},
		{"NaN rate", func(o *sqlquota.Override) { o.Quota.RefillPerSecond = math.NaN() }, quota.ErrInvalid, "refill rate must be finite"},
		{"negative rate", func(o *sqlquota.Override) { o.Quota.RefillPerSecond = -1 }, quota.ErrInvalid, "refill rate must be > 0"},
		{"expiry in the past", func(o *sqlquota.Override) { o.ExpiresAt = clock.Now().Add(-time.Second) }, core.ErrInvalidRequest, "is not in the future"},
		{"expiry now", func(o *sqlquota.Override) { o.ExpiresAt = clock.Now() }, core.ErrInvalidRequest, "is not in the future"},
		{"no author", func(o *sqlquota.Override) { o.UpdatedBy = " " }, core.ErrInvalidRequest, "updated_by is required"},
		{"long author", func(o *sqlquota.Override) { o.UpdatedBy = strings.Repeat("a", 300) }, core.ErrInvalidRequest, "updated_by must be"},
		{"long reason", func(o *sqlquota.Override) { o.Reason = strings.Repeat("r", 2000) }, core.ErrInvalidRequest, "reason must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			_, err := s.Set(t.Context(), o)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Set = %v, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
	if list, err := s.List(t.Context(), sqlquota.ListOptions{IncludeExpired: true}); err != nil || len(list) != 0 {
		t.Errorf("a refused override reached the table: %+v, %v", list, err)
	}
	if _, err := s.Set(t.Context(), good); err != nil {
		t.Errorf("the good override is refused: %v", err)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	db, _ := openSQLite(t)
	cases := []struct {
		name    string
		db      *sql.DB
		dialect sqlquota.Dialect
		table   string
		want    string
	}{
		{"nil db", nil, sqlquota.SQLite, "t", "nil *sql.DB"},
		{"no dialect", db, 0, "t", "unknown SQL dialect"},
		{"injection", db, sqlquota.SQLite, "t; DROP TABLE x", "want letters, digits"},
		{"starts with digit", db, sqlquota.Postgres, "1t", "want letters, digits"},
		{"schema on sqlite", db, sqlquota.SQLite, "s.t", "only PostgreSQL"},
		{"three parts", db, sqlquota.Postgres, "a.b.c", "only PostgreSQL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sqlquota.New(tc.db, tc.dialect, sqlquota.WithTable(tc.table))
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want ErrInvalidConfig containing %q", err, tc.want)
			}
		})
	}
	if _, err := sqlquota.New(db, sqlquota.Postgres, sqlquota.WithTable("tenants.overrides")); err != nil {
		t.Errorf("schema-qualified name on postgres: %v", err)
	}
}

func TestExpiredOverridesAreNotServed(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		clock := newFakeClock()
		s, _ := newStore(t, d, sqlquota.WithClock(clock.Now))
		ctx := t.Context()
		for _, o := range []sqlquota.Override{
			{TenantID: "t1", Bucket: "default", Quota: quota.PerSecond(50), ExpiresAt: clock.Now().Add(10 * time.Second), UpdatedBy: "ops"},
			{TenantID: "t1", Bucket: "export", Quota: quota.PerSecond(7), UpdatedBy: "ops"},
		} {
			if _, err := s.Set(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			advance     time.Duration
			wantBuckets []string
		}{
			{0, []string{"default", "export"}},
			{10*time.Second - time.Microsecond, []string{"default", "export"}},
			{time.Microsecond, []string{"export"}}, // expires_at itself is expired
			{time.Hour, []string{"export"}},
		}
		for i, st := range steps {
			clock.Advance(st.advance)
			ov, err := s.Overrides(ctx, "t1")
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if got := sortedKeys(ov); !reflect.DeepEqual(got, st.wantBuckets) {
				t.Errorf("step %d: buckets %v, want %v", i, got, st.wantBuckets)
			}
			list, _ := s.List(ctx, sqlquota.ListOptions{TenantID: "t1"})
			if len(list) != len(st.wantBuckets) {
				t.Errorf("step %d: List = %d rows, want %d", i, len(list), len(st.wantBuckets))
			}
		}
		all, err := s.List(ctx, sqlquota.ListOptions{IncludeExpired: true})
		if err != nil || len(all) != 2 || !all[0].Expired(clock.Now()) {
			t.Errorf("List(IncludeExpired) = %+v, %v", all, err)
		}
		if n, err := s.PurgeExpired(ctx); err != nil || n != 1 {
			t.Errorf("PurgeExpired = %d, %v; want 1", n, err)
		}
		if all, _ := s.List(ctx, sqlquota.ListOptions{IncludeExpired: true}); len(all) != 1 {
			t.Errorf("after purge: %+v", all)
		}
	})
}

func sortedKeys(m map[string]quota.Quota) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

var testTiers = quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
	"free": {
		Classes: map[string]quota.Quota{
			"default": {Capacity: 20, RefillPerSecond: 2},
			"export":  {Capacity: 10, RefillPerSecond: 0.1},
		},
		Ceiling: &quota.Quota{Capacity: 100, RefillPerSecond: 5},
	},
}}

// settle waits until tenant t1's cache entry is fresh: past its TTL the
// resolver serves the stale entry and refreshes it in the background, so
// this asks (starting the refresh) until an answer comes from a fresh entry.
func settle(t *testing.T, r *quota.TieredResolver) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hits := r.Stats().Hits.Load()
		if _, err := r.Buckets(t.Context(), quota.Tenant{ID: "t1"}, "default"); err != nil {
			t.Fatal(err)
		}
		if r.Stats().Hits.Load() > hits {
			return
		}
		if time.Now().After(deadline) {
			st := r.Stats()
			t.Fatalf("the cache entry was not refreshed: hits %d misses %d loads %d errors %d stale %d", st.Hits.Load(), st.Misses.Load(), st.Loads.Load(), st.LoadErrors.Load(), st.StaleServed.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

func capacities(t *testing.T, r quota.Resolver, class string) (classCap, ceilingCap int64) {
	t.Helper()
	bs, err := r.Buckets(t.Context(), quota.Tenant{ID: "t1"}, class)
	if err != nil || len(bs) != 2 {
		t.Fatalf("Buckets = %+v, %v", bs, err)
	}
	return bs[0].Quota.Capacity, bs[1].Quota.Capacity
}

// TestOverrideAppliesAfterCacheTTL: a new override is served after the cache
// TTL and not before; a deleted one falls back to the tier after the TTL;
// an expired one falls back at the first refresh after its expiry.
func TestOverrideAppliesAfterCacheTTL(t *testing.T) {
	const ttl = 30 * time.Second
	forEachDatabase(t, func(t *testing.T, d database) {
		clock := newFakeClock()
		s, _ := newStore(t, d, sqlquota.WithClock(clock.Now))
		r, err := quota.NewResolver(testTiers, quota.WithOverrides(s), quota.WithCacheTTL(ttl), quota.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		set := func(bucket string, capacity int64, expires time.Time) {
			if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t1", Bucket: bucket, Quota: quota.Quota{Capacity: capacity, RefillPerSecond: 1},
				ExpiresAt: expires, UpdatedBy: "test"}); err != nil {
				t.Fatal(err)
			}
		}
		del := func(bucket string) {
			if err := s.Delete(ctx, "t1", bucket); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			name               string
			before             func()
			advance            time.Duration
			wantClass, wantCei int64
		}{
			{"tier defaults, cached now", nil, 0, 20, 100},
			{"override set: not yet", func() { set("default", 500, time.Time{}); set(quota.CeilingBucket, 900, time.Time{}) }, 0, 20, 100},
			{"just before the TTL", nil, ttl - time.Nanosecond, 20, 100},
			{"at the TTL", nil, time.Nanosecond, 500, 900},
			{"deleted: still cached", func() { del("default") }, ttl - time.Second, 500, 900},
			{"deleted: after the TTL", nil, time.Second, 20, 900},
			{"expiring override", func() { set("default", 700, clock.Now().Add(ttl+10*time.Second)) }, ttl, 700, 900},
			{"expired, cache not yet refreshed", nil, 10 * time.Second, 700, 900},
			{"expired: tier again", nil, ttl, 20, 900},
		}
		for _, st := range steps {
			if st.before != nil {
				st.before()
			}
			clock.Advance(st.advance)
			settle(t, r)
			c, ceil := capacities(t, r, "default")
			if c != st.wantClass || ceil != st.wantCei {
				t.Errorf("%s: capacities %d/%d, want %d/%d", st.name, c, ceil, st.wantClass, st.wantCei)
			}
		}
		if c, _ := capacities(t, r, "export"); c != 10 {
			t.Errorf("export has no override, got capacity %d", c)
		}
	})
}

// TestDatabaseDownServesLastKnown: when the database fails, the resolver
// keeps serving the last overrides it loaded, counts it, and logs it.
func TestDatabaseDownServesLastKnown(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		clock := newFakeClock()
		s, db := newStore(t, d, sqlquota.WithClock(clock.Now))
		var logs testkit.LogBuffer
		r, err := quota.NewResolver(testTiers, quota.WithOverrides(s), quota.WithCacheTTL(time.Second), quota.
			WithClock(clock.Now), quota.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Set(t.Context(), sqlquota.Override{TenantID: "t1", Bucket: "default", Quota: quota.PerSecond(321), UpdatedBy: "test"}); err != nil {
			t.Fatal(err)
		}
		if c, _ := capacities(t, r, "default"); c != 321 {
			t.Fatalf("override not loaded: %d", c)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			clock.Advance(10 * time.Second)
			settle(t, r) // serves the stale entry, then the failed refresh's
			if c, _ := capacities(t, r, "default"); c != 321 {
				t.Fatalf("refresh %d with the database down: capacity %d, want the last known 321", i, c)
			}
		}
		st := r.Stats()
		if st.LoadErrors.Load() != 3 || st.StaleServed.Load() < 3 {
			t.Errorf("LoadErrors %d, StaleServed %d; want 3, at least 3", st.LoadErrors.Load(), st.StaleServed.Load())
		}
		out := logs.String()
		if !strings.Contains(out, "serving last known quotas") || !strings.Contains(out, "stale=true") || !strings.Contains(out, "closed") {
			t.Errorf("log does not say the last known quota is served:\n%s", out)
		}
	})
}

// TestDatabaseUnreachableFromStart: a database that never answered serves
// the tier defaults, and says so.
func TestDatabaseUnreachableFromStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cases := []struct {
		name, driver, dsn string
		dialect           sqlquota.Dialect
	}{
		{"postgres dead port", "pgx", "postgres://postgres@127.0.0.1:" + strconv.Itoa(dead) + "/test?sslmode=disable&connect_timeout=2", sqlquota.Postgres},
		{"sqlite missing directory", "sqlite", "file:" + filepath.Join(t.TempDir(), "no", "such", "dir", "x.db") + "?mode=rw", sqlquota.SQLite},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sql.Open(tc.driver, tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s, err := sqlquota.New(db, tc.dialect)
			if err != nil {
				t.Fatal(err)
			}
			var logs testkit.LogBuffer
			r, err := quota.NewResolver(testTiers, quota.WithOverrides(s), quota.WithLogger(logs.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			if c, ceil := capacities(t, r, "default"); c != 20 || ceil != 100 {
				t.Errorf("capacities %d/%d, want the tier's 20/100", c, ceil)
			}
			if r.Stats().LoadErrors.Load() != 1 || r.Stats().StaleServed.Load() != 0 {
				t.Errorf("LoadErrors %d, StaleServed %d; want 1, 0", r.Stats().LoadErrors.Load(), r.Stats().StaleServed.Load())
			}
			if out := logs.String(); !strings.Contains(out, "override source failed") || !strings.Contains(out, "stale=false") {
				t.Errorf("log:\n%s", out)
			}
		})
	}
}

// TestRowsThatCannotBeEnforcedAreSkipped: a row the CHECK constraints let
// through but core refuses (a refill time over 400 days) is skipped and
// logged; the tier default serves.
func TestRowsThatCannotBeEnforcedAreSkipped(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		var logs testkit.LogBuffer
		s, db := newStore(t, d, sqlquota.WithLogger(logs.Logger()))
		q := "INSERT INTO " + s.Table() + " (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, $6)"
		if d.dialect == sqlquota.SQLite {
			q = strings.ReplaceAll(q, "$", "?")
		}
		var now any = time.Now().UTC()
		if d.dialect == sqlquota.SQLite {
			now = time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
		}
		if _, err := db.ExecContext(t.Context(), q, "t1", "default", 1000000, 1e-9, now, "hand"); err != nil {
			t.Fatal(err)
		}
		// a CHECK constraint refuses what SQL can state
		if _, err := db.ExecContext(t.Context(), q, "t1", "export", 0, 1, now, "hand"); err == nil {
			t.Error("the table accepted capacity 0")
		}
		ov, err := s.Overrides(t.Context(), "t1")
		if err != nil || len(ov) != 0 {
			t.Errorf("Overrides = %v, %v; want the bad row skipped", ov, err)
		}
		if !strings.Contains(logs.String(), "skipping an override that cannot be enforced") {
			t.Errorf("log:\n%s", logs.String())
		}
	})
}

func TestUnstorableTenantHasNoOverrides(t *testing.T) {
	s, _ := newStore(t, databases[0])
	for _, id := range []string{"t\xff", "a\x00b", ""} {
		ov, err := s.Overrides(t.Context(), id)
		if err != nil || len(ov) != 0 {
			t.Errorf("Overrides(%q) = %v, %v; want none, no error", id, ov, err)
		}
	}
}

func TestSchema(t *testing.T) {
	for _, d := range []sqlquota.Dialect{sqlquota.Postgres, sqlquota.SQLite} {
		ddl, err := sqlquota.Schema(d, "")
		if err != nil || !strings.HasPrefix(ddl, "CREATE TABLE IF NOT EXISTS tollgate_overrides (") || !strings.Contains(ddl, "PRIMARY KEY (tenant_id, bucket)") {
			t.Errorf("Schema(%v) = %q, %v", d, ddl, err)
		}
	}
	if _, err := sqlquota.Schema(sqlquota.SQLite, "a;b"); err == nil {
		t.Error("Schema accepted a bad table name")
	}
	for _, s := range []string{"postgres", "PostgreSQL", "pgx", "sqlite", "sqlite3"} {
		if _, err := sqlquota.ParseDialect(s); err != nil {
			t.Errorf("ParseDialect(%q): %v", s, err)
		}
	}
	if _, err := sqlquota.ParseDialect("mysql"); err == nil {
		t.Error("ParseDialect(mysql) succeeded")
	}
}

// TestLimiterQuotaChangeOnRedis: with a real limiter on a real Redis, a
// changed override takes effect at the next cache refresh, and the bucket
// keeps its tokens, clamped to the new capacity (never refilled to it).
func TestLimiterQuotaChangeOnRedis(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database) {
		clock := newFakeClock()
		s, _ := newStore(t, d, sqlquota.WithClock(clock.Now))
		tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 10, RefillPerSecond: 0.001}, // slow: the clock steps add ~0.001 token
		}}}}
		r, err := quota.NewResolver(tiers, quota.WithOverrides(s), quota.WithCacheTTL(time.Second), quota.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := core.New(redistest.Client(t), r, core.WithPrefix(redistest.Prefix(t)),
			core.WithClock(clock.Now), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		tenant := quota.Tenant{ID: "t1"}
		setCap := func(c int64) {
			if _, err := s.Set(ctx, sqlquota.Override{TenantID: "t1", Bucket: "default", Quota: quota.Quota{Capacity: c, RefillPerSecond: 0.001}, UpdatedBy: "test"}); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			name                  string
			change                func()
			advance               time.Duration
			cost                  int64
			wantLimit, wantRemain int64
		}{
			{"tier: spend 4 of 10", nil, 0, 4, 10, 6},
			{"override to 3 set, still cached", func() { setCap(3) }, 0, 0, 10, 6},
			{"next refresh: clamped to 3", nil, time.Second, 0, 3, 3},
			{"spend 1 of the clamped 3", nil, 0, 1, 3, 2},
			{"override to 50: tokens kept, not refilled", func() { setCap(50) }, time.Second, 0, 50, 2},
			{"deleted: tier capacity, tokens kept", func() { _ = s.Delete(ctx, "t1", "default") }, time.Second, 0, 10, 2},
		}
		for _, st := range steps {
			if st.change != nil {
				st.change()
			}
			clock.Advance(st.advance)
			settle(t, r)
			dec, err := lim.Check(ctx, core.Request{Tenant: tenant, Class: "default", Cost: st.cost})
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if !dec.Allowed || dec.Limit != st.wantLimit || dec.Remaining != st.wantRemain {
				t.Errorf("%s: allowed %v limit %d remaining %d (tokens %.4f); want limit %d remaining %d",
					st.name, dec.Allowed, dec.Limit, dec.Remaining, dec.Tokens, st.wantLimit, st.wantRemain)
			}
		}
	})
}

// insertRaw writes a row by hand, as an operator's SQL would, with values
// of any type: SQLite keeps a 1.5 in an INTEGER column (the CHECK
// constraints let it through), and a table made by another migration tool
// may have no CHECK at all.
func insertRaw(t *testing.T, db *sql.DB, table, tenant, bucket string, capacity, rate, updatedAt any) {
	t.Helper()
	q := "INSERT INTO " + table + " (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, 'hand')"
	if _, err := db.ExecContext(t.Context(), q, tenant, bucket, capacity, rate, updatedAt); err != nil {
		t.Fatalf("insert %s/%s: %v", tenant, bucket, err)
	}
}

// TestUnreadableRowIsThatRowsError: one SQLite row whose capacity is not an
// integer (1.5, or 'lots' in a table without the CHECK constraints) or
// whose updated_at is not a time is skipped and logged with its tenant and
// bucket; the tenant's other overrides still apply, and List returns every
// other row, reporting the bad one.
func TestUnreadableRowIsThatRowsError(t *testing.T) {
	const now = "2026-03-01T12:00:00.000000Z"
	for _, c := range []struct {
		name     string
		schema   string // "" is the table Migrate creates
		capacity any
	}{
		{"capacity 1.5", "", 1.5},
		{"capacity lots, no CHECK", `CREATE TABLE %s (tenant_id TEXT NOT NULL, bucket TEXT NOT NULL, capacity INTEGER NOT NULL,
			refill_per_second REAL NOT NULL, expires_at TEXT NULL, updated_at TEXT NOT NULL, updated_by TEXT NOT NULL,
			reason TEXT NOT NULL DEFAULT '', PRIMARY KEY (tenant_id, bucket))`, "lots"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs testkit.LogBuffer
			clock := newFakeClock()
			db, table := openSQLite(t)
			if c.schema != "" {
				if _, err := db.ExecContext(t.Context(), strings.ReplaceAll(c.schema, "%s", table)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := sqlquota.New(db, sqlquota.SQLite, sqlquota.WithLogger(logs.Logger()), sqlquota.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			insertRaw(t, db, table, "t1", "default", 7, 1, now)
			insertRaw(t, db, table, "t1", "export", c.capacity, 1, now)
			insertRaw(t, db, table, "t1", "tenant", 50, 5, now)
			insertRaw(t, db, table, "t7", "default", 3, 1, now)
			insertRaw(t, db, table, "t9", "default", 4, 1, "yesterday")

			ov, err := s.Overrides(t.Context(), "t1")
			if err != nil || len(ov) != 2 || ov["default"].Capacity != 7 || ov["tenant"].Capacity != 50 {
				t.Errorf("Overrides(t1) = %v, %v; want default and tenant, export skipped", ov, err)
			}
			if l := logs.String(); !strings.Contains(l, "tenant=t1") || !strings.Contains(l, "bucket=export") || !strings.Contains(l, "level=WARN") {
				t.Errorf("the skipped row is not logged with its tenant and bucket:\n%s", l)
			}
			// an unreadable updated_at does not matter to the limiter
			if ov, err := s.Overrides(t.Context(), "t9"); err != nil || ov["default"].Capacity != 4 {
				t.Errorf("Overrides(t9) = %v, %v", ov, err)
			}

			// through the resolver: t1's other overrides apply, export is the tier's
			var rlogs testkit.LogBuffer
			r, err := quota.NewResolver(testTiers, quota.WithOverrides(s), quota.WithClock(clock.Now), quota.WithLogger(rlogs.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			if class, ceiling := capacities(t, r, "default"); class != 7 || ceiling != 50 {
				t.Errorf("t1 default: capacity %d, ceiling %d; want the overrides 7 and 50", class, ceiling)
			}
			if class, ceiling := capacities(t, r, "export"); class != 10 || ceiling != 50 {
				t.Errorf("t1 export: capacity %d, ceiling %d; want the tier's 10 and the override 50", class, ceiling)
			}

			list, err := s.List(t.Context(), sqlquota.ListOptions{})
			var got []string
			for _, o := range list {
				got = append(got, o.TenantID+"/"+o.Bucket)
			}
			if want := []string{"t1/default", "t1/tenant", "t7/default"}; !reflect.DeepEqual(got, want) {
				t.Errorf("List = %v, want %v", got, want)
			}
			if err == nil || !strings.Contains(err.Error(), `"t1"`) || !strings.Contains(err.Error(), `"export"`) || !strings.Contains(err.Error(), `"t9"`) {
				t.Errorf("List error %v; want the unreadable rows t1/export and t9/default named", err)
			}
			var re *sqlquota.RowError
			if !errors.As(err, &re) || re.TenantID != "t1" || re.Bucket != "export" || !strings.Contains(re.Error(), "capacity") {
				t.Errorf("List error %v; want a *RowError for t1/export first", err)
			}
			if _, err := s.Get(t.Context(), "t1", "export"); !errors.As(err, &re) {
				t.Errorf("Get(t1, export): %v; want its *RowError", err)
			}
			if o, err := s.Get(t.Context(), "t1", "default"); err != nil || o.Quota.Capacity != 7 {
				t.Errorf("Get(t1, default) = %+v, %v", o, err)
			}
			// one tenant's listing
			list, err = s.List(t.Context(), sqlquota.ListOptions{TenantID: "t7"})
			if err != nil || len(list) != 1 {
				t.Errorf("List(t7) = %v, %v", list, err)
			}
		})
	}
}

// TestPostgresHoldsNoUnreadableRow: PostgreSQL's typed columns refuse what
// SQLite keeps (a capacity of 'lots', a rate of 'fast', an updated_at that
// is not a time), so there the loader never meets such a row.
func TestPostgresHoldsNoUnreadableRow(t *testing.T) {
	d := databases[1]
	s, db := newStore(t, d)
	q := "INSERT INTO " + s.Table() + " (tenant_id, bucket, capacity, refill_per_second, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, 'hand')"
	for _, c := range []struct {
		capacity, rate, updatedAt any
	}{
		{"lots", 1, "2026-03-01T12:00:00Z"},
		{"1.5", 1, "2026-03-01T12:00:00Z"},
		{5, "fast", "2026-03-01T12:00:00Z"},
		{5, 1, "soon"}, // ("yesterday" is a time to PostgreSQL)
	} {
		if _, err := db.ExecContext(t.Context(), q, "t1", "default", c.capacity, c.rate, c.updatedAt); err == nil {
			t.Errorf("PostgreSQL stored capacity %v, rate %v, updated_at %v", c.capacity, c.rate, c.updatedAt)
		}
	}
	if list, err := s.List(t.Context(), sqlquota.ListOptions{IncludeExpired: true}); err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v", list, err)
	}
}
