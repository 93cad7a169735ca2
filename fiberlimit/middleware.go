package fiberlimit

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// New returns a Fiber handler that rate-limits requests with gate, built
// and validated once with gate.New (routes keyed by c.Route().Path,
// "METHOD /path/:param" or "/path/:param"; cost function; header style;
// anonymous callers, keyed by c.IP(): when Config.ProxyHeader is set, also
// set EnableTrustedProxyCheck and TrustedProxies, or a client can choose
// its own key). Register it after
// the authentication middleware, which stores the verified tenant with
// SetTenant (the tenant is read from c.UserContext(), never from a
// header). It uses no fiber.Storage: every check is one atomic script in
// Redis.
//
// For each request: skip (WithNext)? Otherwise ask the gate for a Verdict
// on (method, c.Route().Path, c.IP()), or on the route WithRouteFunc
// names, set its rate-limit headers, and either
// call c.Next or the deny handler. Register it on each route
// (app.Get("/v1/items/:id", limiter, handler)) so that c.Route().Path is
// the route template: under app.Use or app.Group, Fiber v2 has not matched
// the final route yet and reports the mount prefix ("/v1"), so route table
// keys are then prefixes. The HEAD route app.Get registers beside the GET
// runs the same handlers and is charged as the GET route; a request no
// route matches never reaches the handler and is charged nothing, unless
// the service mounts a catch-all after its routes behind the limiter
// (app.Use(limiter, spa)): that handler runs, and the request is charged
// by the mount prefix ("/"), the default route unless the table names it.
//
// Strings taken from the request (method, client IP) are copied before
// they reach core, so nothing of fasthttp's reused buffers outlives the
// handler.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func New(g *gate.Gate, opts ...Option) fiber.Handler {
	c := adapt.New("fiberlimit.New", g, DefaultDenyHandler, opts)
	return func(fc *fiber.Ctx) error {
		// the handler may gate.ReportCost(c.UserContext(), n)
		return c.Serve(fc, endpoint, setHeaders, (*fiber.Ctx).SetUserContext, (*fiber.Ctx).Next)
	}
}

// endpoint is what the gate decides a request on. c.Route().Path is the
// app's own string: safe to keep.
func endpoint(fc *fiber.Ctx) (context.Context, gate.Endpoint) {
	return fc.UserContext(), gate.Endpoint{Method: method(fc.Method()), Pattern: fc.Route().Path, ClientIP: utils.CopyString(fc.IP())}
}

func setHeaders(fc *fiber.Ctx, hs []render.Header) {
	for _, h := range hs {
		fc.Set(h.Name, h.Value)
	}
}

// standardMethods are the methods method returns as constants.
var standardMethods = [...]string{fiber.MethodGet, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch,
	fiber.MethodDelete, fiber.MethodHead, fiber.MethodOptions}

// method returns m as a constant string for the standard methods, and a
// copy otherwise: fc.Method() points into fasthttp's request buffer.
func method(m string) string {
	for _, s := range standardMethods {
		if m == s {
			return s
		}
	}
	return utils.CopyString(m)
}

// SetTenant stores the verified tenant t for the limiter, in the request's
// user context (c.SetUserContext). Call it in the authentication
// middleware, after the credential has been verified.
func SetTenant(c *fiber.Ctx, t quota.Tenant) {
	c.SetUserContext(gate.ContextWithTenant(c.UserContext(), t))
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c *fiber.Ctx, v gate.Verdict) error {
	c.Status(v.Status).Set(fiber.HeaderContentType, v.ContentType)
	return c.Send(v.Body)
}
