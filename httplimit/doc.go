// Package httplimit is tollgate's net/http adapter: middleware of the form
// func(http.Handler) http.Handler that asks
// [github.com/tollgate-go/tollgate/core] for a Verdict on each request and
// renders it. It computes nothing itself: which tenant, which class and
// cost, which numbers and which status are core's rules, held to one
// standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]).
//
// Wiring: authentication first (it stores the verified tenant with
// gate.ContextWithTenant), then the limiter, then the routes:
//
//	mux := http.NewServeMux()
//	mux.HandleFunc("GET /v1/profile", profile)
//	mux.HandleFunc("POST /v1/reports/export", export)
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//		"/healthz":                {Exempt: true},
//	}))
//	if err != nil { ... } // a bad route table, named
//	limit := httplimit.Middleware(gate)
//	http.ListenAndServe(addr, authenticate(limit(mux)))
//
// The route template comes from the Go 1.22 ServeMux: r.Pattern when the
// middleware wraps a route's handler, or the pattern the mux would route to
// when it wraps the *http.ServeMux itself. For other routers set
// WithPatternFunc (chi: chi.RouteContext(r.Context()).RoutePattern(), with
// the middleware mounted inside the route group so that routing has run).
// The raw URL is never used: path parameters would multiply classes.
package httplimit
