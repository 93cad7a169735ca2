package fiberv3limit

import (
	"context"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/utils/v2"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// New returns a Fiber v3 handler that rate-limits requests with gate,
// built and validated once with gate.New (routes keyed by
// c.Route().Path, "METHOD /path/:param" or "/path/:param"; cost function;
// header style; anonymous callers, keyed by c.IP(): when
// Config.ProxyHeader is set, also set Config.TrustProxy and
// TrustProxyConfig, or a client can choose its own key). Register it after
// the authentication middleware, which stores the verified tenant with
// SetTenant (the tenant is read from c.Context(), never from a header). It
// uses no fiber.Storage: every check is one atomic script in Redis.
//
// For each request: skip (WithNext)? Otherwise ask the gate for a Verdict
// on (method, c.Route().Path, c.IP()), or on the route WithRouteFunc
// names, set its rate-limit headers, and either
// call c.Next or the deny handler. Register it on each route
// (app.Get("/v1/items/:id", limiter, handler)) so that c.Route().Path is
// the route template: under app.Use or app.Group, Fiber v3, like v2, has
// not matched the final route yet and reports the mount prefix ("/", "/v1"),
// so route table keys are then prefixes (or set WithPatternFunc). The HEAD
// route Fiber v3 registers for every GET route runs the same handlers and
// is charged as the GET route; a request no route matches never reaches the
// handler and is charged nothing, unless the service mounts a catch-all
// after its routes behind the limiter (app.Use(limiter, spa)): that handler
// runs, and the request is charged by the mount prefix ("/"), the default
// route unless the table names it.
//
// The client IP is copied before it reaches core (c.IP() may point into
// fasthttp's reused buffers); the method and the route template are the
// app's own strings.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func New(g *gate.Gate, opts ...Option) fiber.Handler {
	c := adapt.New("fiberv3limit.New", g, DefaultDenyHandler, opts)
	return func(fc fiber.Ctx) error {
		// the handler may gate.ReportCost(c.Context(), n)
		return c.Serve(fc, endpoint, setHeaders, fiber.Ctx.SetContext, fiber.Ctx.Next)
	}
}

func endpoint(fc fiber.Ctx) (context.Context, gate.Endpoint) {
	return fc.Context(), gate.Endpoint{Method: fc.Method(), Pattern: fc.Route().Path, ClientIP: utils.CopyString(fc.IP())}
}

func setHeaders(fc fiber.Ctx, hs []render.Header) {
	for _, h := range hs {
		fc.Set(h.Name, h.Value)
	}
}

// SetTenant stores the verified tenant t for the limiter in the request's
// context (c.SetContext(gate.ContextWithTenant(c.Context(), t))). Call it
// in the authentication middleware, after the credential has been
// verified; handlers read it back with gate.TenantFromContext(c.Context()).
func SetTenant(c fiber.Ctx, t quota.Tenant) {
	c.SetContext(gate.ContextWithTenant(c.Context(), t))
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c fiber.Ctx, v gate.Verdict) error {
	c.Set(fiber.HeaderContentType, v.ContentType)
	return c.Status(v.Status).Send(v.Body)
}
