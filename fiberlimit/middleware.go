package fiberlimit

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// New returns a Fiber handler that rate-limits requests with lim, after
// the authentication middleware, which stores the verified tenant with
// SetTenant (the tenant is read from c.UserContext(), never from a
// header). It uses no fiber.Storage: every check is one atomic script in
// Redis.
//
// For each request: skip (WithNext)? Otherwise ask core for a Verdict on
// (method, c.Route().Path, c.IP()), set its rate-limit headers, and either
// call c.Next or the deny handler. Register it on each route
// (app.Get("/v1/items/:id", limiter, handler)) so that c.Route().Path is
// the route template: under app.Use or app.Group, Fiber v2 has not matched
// the final route yet and reports the mount prefix ("/v1"), so route table
// keys are then prefixes. The HEAD route app.Get registers beside the GET
// runs the same handlers and is charged as the GET route; a request no
// route matches never reaches the handler and is charged nothing.
//
// Strings taken from the request (method, client IP) are copied before
// they reach core, so nothing of fasthttp's reused buffers outlives the
// handler.
//
// A bad configuration (nil limiter, invalid route table) makes every
// request answer 500 with a problem+json body and report the error to the
// error handler; check it at start-up with Validate.
func New(lim *core.Limiter, opts ...Option) fiber.Handler {
	c := newConfig(opts)
	gate, err := c.NewGate(lim)
	if err != nil {
		body := adapt.Misconfigured.JSON()
		return func(fc *fiber.Ctx) error {
			c.Report(fc, err)
			fc.Status(http.StatusInternalServerError).Set(fiber.HeaderContentType, core.ProblemContentType)
			return fc.Send(body)
		}
	}
	return func(fc *fiber.Ctx) error {
		if c.Skipped(fc) {
			return fc.Next()
		}
		pattern := fc.Route().Path // the app's own string: safe to keep
		if c.pattern != nil {
			pattern = c.pattern(fc)
		}
		v := gate.Decide(c.Context(fc.UserContext(), fc), core.Endpoint{Method: method(fc.Method()), Pattern: pattern, ClientIP: utils.CopyString(fc.IP())})
		c.Report(fc, v.Err)
		for _, h := range v.Headers {
			fc.Set(h.Name, h.Value)
		}
		if v.Proceed {
			defer v.Done() // frees a concurrency slot, panics included
			return fc.Next()
		}
		return c.deny(fc, v)
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
func SetTenant(c *fiber.Ctx, t core.Tenant) {
	c.SetUserContext(core.ContextWithTenant(c.UserContext(), t))
}

// Validate reports whether New(lim, opts...) is well configured.
func Validate(lim *core.Limiter, opts ...Option) error {
	_, err := newConfig(opts).NewGate(lim)
	return err
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(c *fiber.Ctx, v core.Verdict) error {
	c.Status(v.Status).Set(fiber.HeaderContentType, v.ContentType)
	return c.Send(v.Body)
}
