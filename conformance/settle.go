package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/core/gate"
)

// ActualCostHeader is the request header (gRPC: metadata, in lower case)
// by which a settle scenario tells the service's handler what the request
// really cost, a decimal count of tokens. The handler, never the adapter,
// reports it: see [ReportActualCost].
const ActualCostHeader = "X-Actual-Cost"

// ReportActualCost is what every handler of a target does with the value
// of [ActualCostHeader] (empty when the request has none): it reports it as
// the request's actual cost with gate.ReportCost on ctx, the context the
// handler got from the adapter (r.Context(), c.Request.Context(),
// c.UserContext(), a stream's Context(), ...), so that the adapter settles
// the reservation when the handler returns. An error (a malformed value, or
// a context that carries no reservation: the adapter did not hand the
// handler v.CostContext's context) must fail the request: answer 500 (gRPC:
// an error status), which fails the scenario.
func ReportActualCost(ctx context.Context, value string) error {
	if value == "" {
		return nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return fmt.Errorf("conformance: %s %q: %w", ActualCostHeader, value, err)
	}
	if err := gate.ReportCost(ctx, n); err != nil {
		return fmt.Errorf("conformance: the handler could not report its actual cost: %w", err)
	}
	return nil
}

// ErrNoCostReports is what a target's NewInstance returns, for a Setup with
// CostReports, when the service it tests cannot settle a reservation to
// a handler's report (a gateway that only asks a rate-limit service before
// the request). The settle scenarios are then skipped for that target, and
// say why.
var ErrNoCostReports = errors.New("conformance: the target cannot settle reported costs")

// actualCost is the header that makes a handler report n.
func actualCost(n int64) map[string]string {
	return map[string]string{ActualCostHeader: strconv.FormatInt(n, 10)}
}

// sendCost sends a request of endpoint by tenant whose handler reports n
// as its actual cost.
func (e *env) sendCost(in Instance, endpoint, tenant, tier string, n int64) entry {
	e.t.Helper()
	return e.do(in, Request{Endpoint: endpoint, Tenant: tenant, Tier: tier, Header: actualCost(n)})
}

// Settle, refund: the route's cost is a reservation; a handler that reports
// less is refunded the difference when it returns, and the next request's
// headers show it. A refund never lifts a balance above its capacity, and
// it reaches every bucket of the request (the class and the tenant
// ceiling). The headers of the request that reserved show the balance after
// the estimate: it is settled after the response header is written.
func settleRefund(e *env) {
	in := e.instance()
	// export: C=10, ρ=0.4/s, estimate 4; the clock is frozen
	en := e.sendCost(in, EndpointExport, "acme", "", 0) // 10 → 6, refunded to 10, not 14
	wantStatus(e, en, 200)
	en = e.send(in, EndpointExport, "acme", "") // 10 → 6: no report, the estimate stands
	wantStatus(e, en, 200)
	if e.proto == ProtocolHTTP {
		want(e, "X-RateLimit-Remaining after a refund to capacity", en.header("X-Ratelimit-Remaining"), "6")
	}
	wantStatus(e, e.sendCost(in, EndpointExport, "acme", "", 1), 200) // 6 → 2, refunded 3 → 5
	en = e.sendCost(in, EndpointExport, "acme", "", 0)                // 5 → 1, refunded 4 → 5
	wantStatus(e, en, 200)
	if e.proto == ProtocolHTTP {
		want(e, "X-RateLimit-Remaining after a refund", en.header("X-Ratelimit-Remaining"), "1")
	}
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200) // 5 → 1
	en = e.send(in, EndpointExport, "acme", "")                // 1 < 4: (4 − 1)/0.4 = 7.5 s
	wantStatus(e, en, 429)
	want(e, "Retry-After", en.header("Retry-After"), "8")
	// pro: export C=10 ρ=1 beside a tenant ceiling C=6 ρ=0.5
	wantStatus(e, e.sendCost(in, EndpointExport, "initech", "pro", 1), 200) // ceiling 6 → 2, refunded 3 → 5
	en = e.send(in, EndpointExport, "initech", "pro")                       // ceiling 5 → 1
	wantStatus(e, en, 200)
	want(e, "handler calls", e.calls(in), 7)
	e.keys()
	e.expectNoHookErrors()
}

// Settle, debt: a handler that reports more than the balance holds takes it
// below zero. The tenant's next requests of that class (and of every class,
// when the debt is on the tenant ceiling) are denied 429 with a Retry-After
// that counts the debt, while it is repaid at the refill rate; other
// classes and tenants are untouched. A debt is carried in full, however
// deep (no cap is set: docs/semantics.md, "Reserve, then settle").
func settleDebt(e *env) {
	in := e.instance()
	// export: C=10, ρ=0.4/s, estimate 4
	wantStatus(e, e.sendCost(in, EndpointExport, "acme", "", 14), 200) // 10 → 6, charged 10 more → −4
	en := e.send(in, EndpointExport, "acme", "")                       // (4 + 4)/0.4 = 20 s
	wantStatus(e, en, 429)
	want(e, "Retry-After counting a debt of 4", en.header("Retry-After"), "20")
	wantStatus(e, e.send(in, EndpointProfile, "acme", ""), 200)  // another class
	wantStatus(e, e.send(in, EndpointExport, "globex", ""), 200) // another tenant
	e.advance(10 * time.Second)                                  // −4 → 0: repaid, not yet refilled
	en = e.send(in, EndpointExport, "acme", "")
	wantStatus(e, en, 429)
	want(e, "Retry-After while repaying", en.header("Retry-After"), "10")
	e.advance(10 * time.Second) // 0 → 4
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200)
	// a debt beyond one capacity is carried in full: 6 − 996 is −990
	wantStatus(e, e.sendCost(in, EndpointExport, "hooli", "", 1000), 200)
	en = e.send(in, EndpointExport, "hooli", "") // (4 + 990)/0.4 = 2485 s
	wantStatus(e, en, 429)
	want(e, "Retry-After of a debt of 99 capacities", en.header("Retry-After"), "2485")
	// pro: the debt reaches the tenant ceiling (C=6 ρ=0.5) too: 2 − 4 = −2
	wantStatus(e, e.sendCost(in, EndpointExport, "initech", "pro", 8), 200)
	en = e.send(in, EndpointProfile, "initech", "pro") // the ceiling binds: (1 + 2)/0.5 = 6 s
	wantStatus(e, en, 429)
	want(e, "Retry-After of the ceiling's debt", en.header("Retry-After"), "6")
	want(e, "handler calls", e.calls(in), 6)
	e.keys()
	e.expectNoHookErrors()
}

// Settle, no report: a handler that reports nothing leaves the estimate
// charged; one that reports the estimate changes nothing; a denied request
// never reaches its handler, so its report settles nothing.
func settleNoReport(e *env) {
	in := e.instance()
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200) // 10 → 6
	wantStatus(e, e.send(in, EndpointExport, "acme", ""), 200) // 6 → 2
	en := e.sendCost(in, EndpointExport, "acme", "", 0)        // denied: (4 − 2)/0.4 = 5 s
	wantStatus(e, en, 429)
	want(e, "Retry-After", en.header("Retry-After"), "5")
	e.advance(5 * time.Second)                                        // 2 → 4
	wantStatus(e, e.sendCost(in, EndpointExport, "acme", "", 4), 200) // 4 → 0, settled to 4: no change
	en = e.send(in, EndpointExport, "acme", "")
	wantStatus(e, en, 429)
	want(e, "Retry-After", en.header("Retry-After"), "10")
	want(e, "handler calls", e.calls(in), 3)
	e.keys()
	e.expectNoHookErrors()
}
