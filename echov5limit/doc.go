// Package echov5limit is tollgate's Echo v5 adapter: an echo.MiddlewareFunc
// for github.com/labstack/echo/v5 that asks
// [github.com/tollgate-go/tollgate/core] for a Verdict on each request and
// renders it in Echo v5's idiom. It computes nothing itself: which tenant,
// which class and cost, which numbers and which status are core's rules,
// held to one standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]); a service on Echo v4
// (package echolimit) and one on Echo v5 give the same keys, headers and
// bodies, so services can move from one major to the other one at a time.
//
// Wiring: authentication first (it stores the verified tenant in the
// request context with gate.ContextWithTenant), then the limiter:
//
//	e := echo.New() // Echo v5 keys c.RealIP() on the peer address unless you set an IPExtractor
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//		"/healthz":                {Exempt: true},
//	}))
//	if err != nil { ... } // a bad route table, named
//	e.Use(authenticate, echov5limit.Middleware(gate))
//
// Route keys are Echo's route templates (c.Path(): "/v1/items/:id"),
// optionally preceded by the method; Echo runs e.Use middleware after
// routing, so the template is known there. The rate-limit headers are
// written to the response before the handler runs, so an error returned by
// the handler or by a custom deny handler (an *echo.HTTPError, one of
// Echo's sentinel errors, an *echo.ProblemError) is rendered by the
// HTTPErrorHandler under them.
//
// The package is named for the framework's major version so that it can
// live beside echolimit (Echo v4) without colliding with Go's semantic
// import versioning of tollgate's own modules.
package echov5limit
