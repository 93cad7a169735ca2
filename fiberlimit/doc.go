// Package fiberlimit is tollgate's Fiber v2 adapter: a fiber.Handler that
// asks [github.com/tollgate-go/tollgate/core] for a Verdict on each request
// and renders it in Fiber's idiom. It computes nothing itself: which
// tenant, which class and cost, which numbers and which status are core's
// rules, held to one standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]). It never uses Fiber's
// limiter middleware or a fiber.Storage, whose read-then-write is not
// atomic across replicas.
//
// Wiring: authentication first (it stores the verified tenant with
// SetTenant, in c.UserContext()), then the limiter on each route:
//
//	app := fiber.New()
//	app.Use(authenticate) // calls fiberlimit.SetTenant(c, tenant) after verifying the credential
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//	}))
//	if err != nil { ... } // a bad route table, named
//	limit := fiberlimit.New(gate)
//	app.Get("/v1/profile", limit, profile)
//	app.Post("/v1/reports/export", limit, export)
//
// Route keys are Fiber's route templates (c.Route().Path:
// "/v1/items/:id"), optionally preceded by the method. Fiber reuses its
// request buffers once a handler returns: the middleware copies what it
// passes on (utils.CopyString), and hooks (WithRouteFunc,
// WithPatternFunc) must not keep strings taken from the context.
package fiberlimit
