// Package ginlimit is tollgate's Gin adapter: a gin.HandlerFunc that asks
// [github.com/tollgate-go/tollgate/core] for a Verdict on each request and
// renders it in Gin's idiom (headers, c.Abort and the problem+json answer
// on a denial). It computes nothing itself: which tenant, which class and
// cost, which numbers and which status are core's rules, held to one
// standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]).
//
// Wiring: authentication first (it stores the verified tenant in the
// request context with gate.ContextWithTenant), then the limiter:
//
//	r := gin.New()
//	_ = r.SetTrustedProxies(nil) // or your proxies: c.ClientIP() keys anonymous callers
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//		"/healthz":                {Exempt: true},
//	}))
//	if err != nil { ... } // a bad route table, named
//	r.Use(authenticate, ginlimit.Middleware(gate))
//
// Route keys are Gin's route templates (c.FullPath(): "/v1/items/:id"),
// optionally preceded by the method.
package ginlimit
