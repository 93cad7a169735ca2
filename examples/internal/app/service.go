package app

import (
	"github.com/tollgate-go/tollgate/core"
)

// The service every example serves, whatever its framework.
const (
	// PathProfile is GET: the caller's profile (class default, cost 1).
	PathProfile = "/v1/profile"
	// PathExport is POST: export a report (class export, cost 5).
	PathExport = "/v1/reports/export"
	// PathHealth is GET, never authenticated, never limited.
	PathHealth = "/healthz"
	// PathMetrics is GET: Prometheus text, never authenticated or limited.
	PathMetrics = "/metrics"

	// ClassExport is the class of report exports, as tollgate.yaml names it.
	ClassExport = "export"
)

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
func (a *App) GetProfile(t core.Tenant) Profile {
	tier := t.Tier
	if tier == "" {
		tier = a.Resolver.Tiers().Default
	}
	return Profile{Tenant: t.ID, Tier: tier}
}

// ExportReport is the export handler's work (here, a stand-in for
// something expensive).
func (a *App) ExportReport(t core.Tenant) Report {
	return Report{Tenant: t.ID, Format: "csv", Status: "ready"}
}

// Health is the answer of GET /healthz.
type Health struct {
	Status string `json:"status"`
}
