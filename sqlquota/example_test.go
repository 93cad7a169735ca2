package sqlquota_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/sqlquota"
	_ "modernc.org/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "quotas.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()

	store, _ := sqlquota.New(db, sqlquota.SQLite)
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// A sales exception: tenant t42 gets a bigger export bucket.
	_, err = store.Set(ctx, sqlquota.Override{
		TenantID: "t42", Bucket: "export",
		Quota:     quota.Quota{Capacity: 500, RefillPerSecond: 5},
		UpdatedBy: "alice", Reason: "JIRA-123",
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"export": {Capacity: 10, RefillPerSecond: 0.1},
	}}}}
	resolver, _ := quota.NewResolver(tiers, quota.WithOverrides(store))
	for _, id := range []string{"t42", "t7"} {
		bs, _ := resolver.Buckets(ctx, quota.Tenant{ID: id}, "export")
		fmt.Println(id, bs[0].Quota)
	}
	// Output:
	// t42 500 burst, 5/s
	// t7 10 burst, 0.1/s
}

func ExampleSchema() {
	ddl, _ := sqlquota.Schema(sqlquota.SQLite, "")
	fmt.Print(ddl)
	// Output:
	// CREATE TABLE IF NOT EXISTS tollgate_overrides (
	//     tenant_id         TEXT    NOT NULL CHECK (tenant_id <> ''),
	//     bucket            TEXT    NOT NULL CHECK (bucket <> ''),
	//     capacity          INTEGER NOT NULL CHECK (capacity > 0 AND capacity <= 1099511627776),
	//     refill_per_second REAL    NOT NULL CHECK (refill_per_second > 0 AND refill_per_second <= 1e12),
	//     expires_at        TEXT    NULL,
	//     updated_at        TEXT    NOT NULL,
	//     updated_by        TEXT    NOT NULL,
	//     reason            TEXT    NOT NULL DEFAULT '',
	//     concurrency       BIGINT NULL CHECK (concurrency IS NULL OR (concurrency > 0 AND concurrency <= 100000)),
	//     PRIMARY KEY (tenant_id, bucket)
	// );
}
