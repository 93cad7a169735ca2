package faults_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/sqlquota"
)

// postgres opens the test database (TOLLGATE_TEST_POSTGRES, else the
// machine's local server) and a fresh override table in a schema of its
// own, dropped at the end. Unreachable: fails under CI=true, skips otherwise.
func postgres(t *testing.T) (admin *sql.DB, store *sqlquota.Store, table string) {
	t.Helper()
	url := os.Getenv("TOLLGATE_TEST_POSTGRES")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	admin, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		if redistest.InCI() {
			t.Fatalf("PostgreSQL at %s: %v", url, err)
		}
		t.Skipf("PostgreSQL at %s is unreachable (skipped outside CI): %v", url, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "tg_fault_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	table = schema + "." + sqlquota.DefaultTable
	store, err = sqlquota.New(db, sqlquota.Postgres, sqlquota.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return admin, store, table
}

// TestOverrideDatabaseHung: the override database hangs (a real PostgreSQL
// whose override table another session holds an ACCESS EXCLUSIVE lock on:
// every query waits). Tenants already cached keep their last quota, served
// stale while the refresh waits in the background; a tenant's first lookup
// waits no longer than the check timeout, then the tier defaults serve and
// Redis decides the check (never the failure policy: the database is not
// the store). No check waits for the override timeout (2 s).
func TestOverrideDatabaseHung(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			admin, store, table := postgres(t)
			ctx := context.Background()
			override := quota.Quota{Capacity: 10, RefillPerSecond: 5}
			if _, err := store.Set(ctx, sqlquota.Override{TenantID: "t0", Bucket: "default", Quota: override, UpdatedBy: "faults"}); err != nil {
				t.Fatal(err)
			}
			res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
				"free": {Classes: map[string]quota.Quota{"default": slowQuota}},
			}}, quota.WithOverrides(store), quota.WithCacheTTL(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := core.New(redistest.Client(t), res, core.WithPrefix(redistest.Prefix(t)), core.WithFailurePolicy(p),
				core.WithTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lim.Close() })
			const tenants = 4
			for i := range tenants { // cache every tenant's overrides (a first lookup may outlast the check timeout)
				waitFor(t, 5*time.Second, "tenant t"+strconv.Itoa(i)+"'s overrides cached", func() bool {
					_, err := lim.Allow(ctx, quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1)
					return err == nil
				})
			}

			tx, err := admin.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			ld := startLoad(lim, 4, tenants)
			defer ld.finish()
			// new tenants meanwhile: their first lookup cannot be answered
			var mu sync.Mutex
			newReasons := map[core.Reason]int{}
			var newWorst time.Duration
			var newLate []error // new tenants answered by the policy for the database's lateness
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				repeat(stop, func(i int) {
					start := time.Now()
					d, err := lim.Allow(ctx, quota.Tenant{ID: "new" + strconv.Itoa(i)}, "default", 1)
					took := time.Since(start)
					mu.Lock()
					if d.Degraded() && err != nil && strings.Contains(err.Error(), "resolve") {
						newLate = append(newLate, err)
					}
					newReasons[d.Reason]++
					newWorst = max(newWorst, took)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				})
			})
			began := time.Now()
			time.Sleep(2500 * time.Millisecond) // past the 2 s override timeout
			close(stop)
			wg.Wait()
			elapsed := time.Since(began) + 200*time.Millisecond
			m, worst := ld.snapshot()
			worst = max(worst, newWorst)
			if worst > latencyBound {
				t.Fatalf("a check took %v while the override database hung (check timeout 100ms)", worst)
			}
			ld.mu.Lock()
			resolveErrs := ld.resolve
			ld.mu.Unlock()
			// (a Redis call timing out on a loaded machine is a store
			// failure answered by policy, not the override database's doing)
			if resolveErrs > 0 || m[core.ReasonOK] == 0 {
				t.Fatalf("cached tenants were not served from their last known quota: %d waited for the database; %v", resolveErrs, m)
			}
			// (a Redis call timing out on a loaded machine is answered by
			// policy too: only the resolver's part is asserted)
			if len(newLate) > 0 || newReasons[core.ReasonOK] == 0 {
				t.Fatalf("new tenants were not decided by Redis on the tier defaults: %v; %d answered by policy for the database, first %v", newReasons, len(newLate), newLate)
			}
			checkAccounting(t, ld, elapsed)
			ld.mu.Lock()
			t0 := ld.admitted["t0"]
			ld.mu.Unlock()
			if bound := float64(override.Capacity) + override.RefillPerSecond*elapsed.Seconds(); float64(t0) > bound {
				t.Fatalf("t0 admitted %d, more than its override allows (%.1f): the stale override was not served", t0, bound)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "a new tenant's lookup after the lock is released", func() bool {
				d, err := lim.Allow(ctx, quota.Tenant{ID: "after"}, "default", 1)
				return err == nil && d.Reason == core.ReasonOK
			})
			t.Logf("worst check %v; cached tenants %v; new tenants %v", worst, m, newReasons)
			record(row{"override database hung (PostgreSQL table lock held)", p,
				"cached tenants served their last known quota (refreshed in the background); a new tenant's first lookup " +
					"gets the tier defaults within the check timeout, decided by Redis, never the policy; accounting holds", worst})
		})
	}
}
