package app

import (
	"context"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// The service every example serves, whatever its framework.
const (
	// PathProfile is GET: the caller's profile (class default, cost 1).
	PathProfile = "/v1/profile"
	// PathExport is POST: export a report (class export, cost 5).
	PathExport = "/v1/reports/export"
	// PathReports is GET: the caller's reports, slow (about 200 ms; class
	// reports: for tier free, 2 in flight per tenant across every replica).
	PathReports = "/v1/reports"
	// PathHealth is GET, never authenticated, never limited.
	PathHealth = "/healthz"
	// PathMetrics is GET: Prometheus text, never authenticated or limited.
	PathMetrics = "/metrics"

	// ClassExport is the class of report exports, as tollgate.yaml names it.
	ClassExport = "export"

	// reportsTime is how long listing the reports takes.
	reportsTime = 200 * time.Millisecond
)

// Reports is the answer of GET /v1/reports.
type Reports struct {
	Tenant  string   `json:"tenant"`
	Reports []string `json:"reports"`
}

// ListReports is the reports handler's work: about 200 ms (a stand-in for
// a slow query), less when ctx ends first.
func (a *App) ListReports(ctx context.Context, t quota.Tenant) Reports {
	timer := time.NewTimer(reportsTime)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return Reports{Tenant: t.ID, Reports: []string{"2026-q3.csv", "2026-q4.csv"}}
}

// Profile is the answer of GET /v1/profile.
type Profile struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
}

// Report is the answer of POST /v1/reports/export.
type Report struct {
	Tenant string `json:"tenant"`
	Format string `json:"format"`
	Status string `json:"status"`
}

// GetProfile is the profile handler's work, the same in every framework.
func (a *App) GetProfile(t quota.Tenant) Profile {
	tier := t.Tier
	if tier == "" {
		tier = a.Resolver.Tiers().Default
	}
	return Profile{Tenant: t.ID, Tier: tier}
}

// ExportReport is the export handler's work (here, a stand-in for
// something expensive).
func (a *App) ExportReport(t quota.Tenant) Report {
	return Report{Tenant: t.ID, Format: "csv", Status: "ready"}
}

// Health is the answer of GET /healthz.
type Health struct {
	Status string `json:"status"`
}
