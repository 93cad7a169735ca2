package app

import (
	"context"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
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

	// ClassExport is the class of report exports.
	ClassExport = "export"
	// ExportCost is the tokens one export takes.
	ExportCost = 5
)

// BuiltinTiers are the tiers served when TOLLGATE_CONFIG is not set.
func BuiltinTiers() core.Tiers {
	return core.Tiers{Default: "free", Tiers: map[string]core.Tier{
		"free": {Classes: map[string]core.Quota{
			core.DefaultClass: {Capacity: 20, RefillPerSecond: 2},
			ClassExport:       {Capacity: 10, RefillPerSecond: 0.1},
		}},
		"pro": {Classes: map[string]core.Quota{
			core.DefaultClass: {Capacity: 200, RefillPerSecond: 50},
			ClassExport:       {Capacity: 100, RefillPerSecond: 2},
		}},
	}}
}

// Routes is the HTTP route table: route templates to class and cost. Keys
// are the same in every framework here, since no route has a parameter.
func Routes() core.Routes {
	return core.Routes{
		"GET " + PathProfile: {Class: core.DefaultClass, Cost: 1},
		"POST " + PathExport: {Class: ClassExport, Cost: ExportCost},
		PathHealth:           {Exempt: true},
		PathMetrics:          {Exempt: true},
	}
}

// GRPCMethods is the gRPC method table: full method to class and cost.
func GRPCMethods() core.Routes {
	return core.Routes{
		demopb.Demo_GetProfile_FullMethodName:   {Class: core.DefaultClass, Cost: 1},
		demopb.Demo_ExportReport_FullMethodName: {Class: ClassExport, Cost: ExportCost},
	}
}

// CostFunc returns the class and cost a TOLLGATE_CONFIG file gives an
// endpoint (HTTP routes, or gRPC methods when the pattern is a full
// method), read from the configuration in force so that a reload applies at
// once; ok false falls back to the built-in table. It is nil without a file.
func (a *App) CostFunc() core.CostFunc {
	if a.reloader == nil {
		return nil
	}
	rl := a.reloader
	return func(_ context.Context, _ core.Tenant, e core.Endpoint) (core.Route, bool) {
		cfg := rl.Config()
		if cfg == nil {
			return core.Route{}, false
		}
		if e.Method == "" {
			if m, ok := cfg.GRPCMethod(e.Pattern); ok {
				return core.Route{Class: m.Class, Cost: m.Cost}, true
			}
			return core.Route{}, false
		}
		if r, ok := cfg.Route(e.Method, e.Pattern); ok {
			return core.Route{Class: r.Class, Cost: r.Cost}, true
		}
		return core.Route{}, false
	}
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
