// Package fiberv3limit is tollgate's Fiber v3 adapter: a fiber.Handler for
// github.com/gofiber/fiber/v3 that asks
// [github.com/tollgate-go/tollgate/core] for a Verdict on each request and
// renders it in Fiber v3's idiom. It computes nothing itself: which tenant,
// which class and cost, which numbers and which status are core's rules,
// held to one standard for every adapter by the conformance suite
// ([github.com/tollgate-go/tollgate/conformance]); a service on Fiber v2
// (package fiberlimit) and one on Fiber v3 give the same keys, headers and
// bodies. It never uses Fiber's limiter middleware or a fiber.Storage,
// whose read-then-write is not atomic across replicas.
//
// Wiring: authentication first (it stores the verified tenant with
// SetTenant, in the request's context.Context: c.Context()), then the
// limiter on each route:
//
//	app := fiber.New()
//	app.Use(authenticate) // calls fiberv3limit.SetTenant(c, tenant) after verifying the credential
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"POST /v1/reports/export": {Class: "export", Cost: 5},
//	}))
//	if err != nil { ... } // a bad route table, named
//	limit := fiberv3limit.New(gate)
//	app.Get("/v1/profile", limit, profile)
//	app.Post("/v1/reports/export", limit, export)
//
// Route keys are Fiber's route templates (c.Route().Path:
// "/v1/items/:id"), optionally preceded by the method. Fiber v3 did not
// change how app.Use and app.Group run: their handlers still run before
// the final route is matched, and c.Route() there is the Use route, whose
// Path is the mount prefix ("/" for app.Use, "/v1" for a group). Register
// the handler on each route, or give WithPatternFunc a way to find the
// template. Fiber reuses its request buffers once a handler returns: the
// handler copies what it passes on, and hooks (WithRouteFunc,
// WithPatternFunc) must not keep strings taken from the context.
//
// The package is named for the framework's major version so that it can
// live beside fiberlimit (Fiber v2) without colliding with Go's semantic
// import versioning of tollgate's own modules.
package fiberv3limit
