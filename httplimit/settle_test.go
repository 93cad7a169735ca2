package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/httplimit"
)

// exportTokens is tenant's balance of the unit tiers' export class
// (capacity 10, refill 0.01/s: under 0.1 of refill in a test's life).
func exportTokens(t *testing.T, lim *core.Limiter, tenant string) float64 {
	t.Helper()
	d, err := lim.Peek(context.Background(), quota.Tenant{ID: tenant}, "export")
	if err != nil {
		t.Fatal(err)
	}
	return d.Tokens
}

// TestSettle: a handler reports its actual cost on the request's context,
// or in a response header the middleware removes; the reservation (the
// route's cost, 4) is settled to it when the handler returns; without a
// report the estimate stands.
func TestSettle(t *testing.T) {
	lim := testkit.NewUnitLimiter(t)
	g := testkit.NewUnitGate(t, lim, gate.WithCostReports(), gate.WithDefaultRoute(gate.Route{Class: "export", Cost: 4}))
	var hooked error
	mw := httplimit.Middleware(g, httplimit.WithCostHeader("tollgate-cost"), httplimit.WithErrorHandler(func(_ *http.Request, err error) { hooked = err }))
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    float64
		hooked  bool
	}{
		{"context", func(w http.ResponseWriter, r *http.Request) {
			if err := gate.ReportCost(r.Context(), 7); err != nil {
				t.Error(err)
			}
		}, 3, false},
		{"header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Tollgate-Cost", "1")
			_, _ = w.Write([]byte("done"))
		}, 9, false},
		{"header, nothing written", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Tollgate-Cost", "2")
		}, 8, false},
		{"no report", func(w http.ResponseWriter, r *http.Request) {}, 6, false},
		{"bad header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Tollgate-Cost", "-3")
			w.WriteHeader(http.StatusCreated)
		}, 6, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hooked = nil
			tenant := "settle-" + c.name
			w := serve(mw(c.handler), withTenant(httptest.NewRequest("POST", "/v1/complete", nil), tenant))
			if w.Code >= 300 {
				t.Fatalf("status %d", w.Code)
			}
			if v := w.Header().Get("Tollgate-Cost"); v != "" {
				t.Fatalf("the cost header reached the client: %q", v)
			}
			if got := exportTokens(t, lim, tenant); got < c.want || got > c.want+0.1 {
				t.Fatalf("balance %v, want %v", got, c.want)
			}
			if (hooked != nil) != c.hooked || (hooked != nil && !errors.Is(hooked, core.ErrInvalidRequest)) {
				t.Fatalf("error hook %v, want one: %v", hooked, c.hooked)
			}
		})
	}
	t.Run("without the option the header is the handler's", func(t *testing.T) {
		h := httplimit.Middleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Tollgate-Cost", "1")
		}))
		w := serve(h, withTenant(httptest.NewRequest("POST", "/v1/complete", nil), "settle-plain"))
		if w.Header().Get("Tollgate-Cost") != "1" {
			t.Fatal("the header was removed without WithCostHeader")
		}
		if got := exportTokens(t, lim, "settle-plain"); got < 6 || got > 6.1 {
			t.Fatalf("balance %v, want 6: the estimate stands", got)
		}
	})
}
