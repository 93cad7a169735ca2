// Package echolimit is tollgate's Echo v4 adapter: an echo.MiddlewareFunc
// that asks [github.com/tollgate-go/tollgate/core] for a Verdict on each
// request and renders it in Echo's idiom. It computes nothing itself: which
// tenant, which class and cost, which numbers and which status are core's
// rules, held to one standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]). It is not built on Echo's
// RateLimiterStore, whose Allow(identifier) has no context, no cost and no
// headers to report.
//
// Wiring: authentication first (it stores the verified tenant in the
// request context with gate.ContextWithTenant), then the limiter:
//
//	e := echo.New()
//	e.IPExtractor = echo.ExtractIPDirect() // or your proxies: c.RealIP() keys anonymous callers
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//		"/healthz":                {Exempt: true},
//	}))
//	if err != nil { ... } // a bad route table, named
//	e.Use(authenticate, echolimit.Middleware(gate))
//
// Route keys are Echo's route templates (c.Path(): "/v1/items/:id"),
// optionally preceded by the method. The rate-limit headers are written to
// the response before the handler runs, so an *echo.HTTPError returned by
// the handler (or by a custom deny handler) is rendered with them.
package echolimit
