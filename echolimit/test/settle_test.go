package echolimit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/echolimit"
)

// TestSettle: a handler reports its actual cost on the request's context;
// the reservation (the route's cost, 4) is settled to it when the handler
// returns; without a report the estimate stands.
func TestSettle(t *testing.T) {
	lim := conformance.NewUnitLimiter(t)
	g := conformance.NewUnitGate(t, lim, gate.WithCostReports(), gate.WithDefaultRoute(gate.Route{Class: "export", Cost: 4}))
	for _, c := range []struct {
		tenant string
		report int64 // -1: none
		want   float64
	}{{"echo-up", 9, 1}, {"echo-down", 1, 9}, {"echo-none", -1, 6}} {
		r := echo.New()
		r.Use(tenant(c.tenant), echolimit.Middleware(g))
		r.POST("/v1/complete", func(ec echo.Context) error {
			if c.report >= 0 {
				if err := gate.ReportCost(ec.Request().Context(), c.report); err != nil {
					t.Error(err)
				}
			}
			return ec.NoContent(http.StatusOK)
		})
		if w := get(r, "POST", "/v1/complete"); w.Code != http.StatusOK {
			t.Fatalf("%s: status %d", c.tenant, w.Code)
		}
		d, err := lim.Peek(context.Background(), quota.Tenant{ID: c.tenant}, "export")
		if err != nil {
			t.Fatal(err)
		}
		if d.Tokens < c.want || d.Tokens > c.want+0.1 {
			t.Fatalf("%s: %v tokens, want %v", c.tenant, d.Tokens, c.want)
		}
	}
}
