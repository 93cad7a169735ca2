package fiberlimit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/conformance"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/fiberlimit"
)

// TestSettle: a handler reports its actual cost on c.UserContext(); the
// reservation (the route's cost, 4) is settled to it when the handler
// returns; without a report the estimate stands.
func TestSettle(t *testing.T) {
	lim := newLimiter(t)
	t.Cleanup(func() { _ = lim.Close() })
	gate := conformance.NewUnitGate(t, lim, tggate.WithCostReports(), tggate.WithDefaultRoute(tggate.Route{Class: "export", Cost: 4}))
	for _, c := range []struct {
		tenant string
		report int64 // -1: none
		want   float64
	}{{"fiber-up", 9, 1}, {"fiber-down", 1, 9}, {"fiber-none", -1, 6}} {
		app := fiber.New()
		app.Use(tenant(c.tenant), fiberlimit.New(gate))
		app.Post("/v1/complete", func(fc *fiber.Ctx) error {
			if c.report >= 0 {
				if err := tggate.ReportCost(fc.UserContext(), c.report); err != nil {
					t.Error(err)
				}
			}
			return fc.SendStatus(http.StatusOK)
		})
		if res := do(t, app, "POST", "/v1/complete"); res.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", c.tenant, res.StatusCode)
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
