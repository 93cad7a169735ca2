package fiberv3limit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/tollgate-go/tollgate/conformance"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/fiberv3limit"
)

// TestSettle: a handler reports its actual cost on c.Context(); the
// reservation (the route's cost, 4) is settled to it when the handler
// returns; without a report the estimate stands.
func TestSettle(t *testing.T) {
	lim := conformance.NewUnitLimiter(t)
	t.Cleanup(func() { _ = lim.Close() })
	gate := conformance.NewUnitGate(t, lim, tggate.WithCostReports(), tggate.WithDefaultRoute(tggate.Route{Class: "export", Cost: 4}))
	for _, c := range []struct {
		tenant string
		report int64 // -1: none
		want   float64
	}{{"fiber3-up", 9, 1}, {"fiber3-down", 1, 9}, {"fiber3-none", -1, 6}} {
		app := fiber.New()
		app.Use(as(c.tenant), fiberv3limit.New(gate))
		app.Post("/v1/complete", func(fc fiber.Ctx) error {
			if c.report >= 0 {
				if err := tggate.ReportCost(fc.Context(), c.report); err != nil {
					t.Error(err)
				}
			}
			return fc.SendStatus(http.StatusOK)
		})
		if w := serve(app, "POST", "/v1/complete"); w.Code != http.StatusOK {
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
