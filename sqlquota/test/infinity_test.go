package sqlquota_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/sqlquota"
)

// TestPostgresInfinity: a row written by hand with expires_at = 'infinity'
// (never expires) is applied by a service and is the same unexpired row to
// List and Get; one with '-infinity' (always expired) is neither applied
// nor listed as current, and is listed as expired with IncludeExpired.
func TestPostgresInfinity(t *testing.T) {
	s, db := newStore(t, databases[1])
	for _, row := range []struct{ tenant, expires string }{{"forever", "infinity"}, {"never", "-infinity"}} {
		q := "INSERT INTO " + s.Table() + " (tenant_id, bucket, capacity, refill_per_second, expires_at, updated_at, updated_by) VALUES ($1, 'export', 7, 1, $2, now(), 'hand')"
		if _, err := db.ExecContext(t.Context(), q, row.tenant, row.expires); err != nil {
			t.Fatalf("insert %s: %v", row.tenant, err)
		}
	}
	if o, err := s.Overrides(t.Context(), "forever"); err != nil || o["export"].Capacity != 7 {
		t.Fatalf("a service's overrides of an 'infinity' row: %+v, %v", o, err)
	}
	if o, err := s.Overrides(t.Context(), "never"); err != nil || len(o) != 0 {
		t.Fatalf("a service's overrides of a '-infinity' row: %+v, %v", o, err)
	}
	list, err := s.List(t.Context(), sqlquota.ListOptions{})
	if err != nil || len(list) != 1 || list[0].TenantID != "forever" || !list[0].ExpiresAt.IsZero() {
		t.Fatalf("List = %+v, %v; want the 'infinity' row, never expiring", list, err)
	}
	if o, err := s.Get(t.Context(), "forever", "export"); err != nil || !o.ExpiresAt.IsZero() || o.Quota.Capacity != 7 {
		t.Fatalf("Get = %+v, %v", o, err)
	}
	all, err := s.List(t.Context(), sqlquota.ListOptions{IncludeExpired: true})
	if err != nil || len(all) != 2 {
		t.Fatalf("List with expired = %+v, %v", all, err)
	}
	for _, o := range all {
		if o.TenantID == "never" && !o.Expired(o.UpdatedAt) {
			t.Errorf("the '-infinity' row is not expired: %+v", o)
		}
	}
}
