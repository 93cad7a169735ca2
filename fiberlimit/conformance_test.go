package fiberlimit_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate-go/tollgate/conformance"
	tggate "github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/fiberlimit"
	"github.com/valyala/fasthttp"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant for the limiter.
func auth(c *fiber.Ctx) error {
	if t, ok := conformance.Authenticate(c.Get("Authorization")); ok {
		fiberlimit.SetTenant(c, t)
	}
	return c.Next()
}

// suiteGate is the suite's configuration as the gate the handler takes.
func suiteGate(s conformance.Setup) (*tggate.Gate, error) {
	return tggate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, conformance.HTTPEndpoint.ColonPath))...)
}

var target = conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
	g, err := suiteGate(s)
	if err != nil {
		return nil, err
	}
	limit := fiberlimit.New(g, fiberlimit.WithErrorHandler(func(_ *fiber.Ctx, err error) { s.OnError(err) }))
	inst := &instance{}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(auth)
	handler := func(c *fiber.Ctx) error {
		inst.calls.Inc()
		if err := conformance.ReportActualCost(c.UserContext(), c.Get(conformance.ActualCostHeader)); err != nil {
			return c.Status(http.StatusInternalServerError).SendString(err.Error())
		}
		return c.SendStatus(http.StatusOK)
	}
	for _, e := range conformance.HTTPEndpoints {
		if e.Method == http.MethodGet {
			app.Get(e.ColonPath(), limit, handler) // and HEAD, as Fiber v2's Get does
			continue
		}
		app.Add(e.Method, e.ColonPath(), limit, handler)
	}
	if s.CatchAll {
		app.Use(limit, handler) // after the routes: what no route matched
	}
	inst.handler = app.Handler()
	return inst, nil
})

// instance serves requests with the app's fasthttp handler in process, with
// the suite's client address as the connection's remote address.
type instance struct {
	handler fasthttp.RequestHandler
	calls   conformance.Counter
}

func (i *instance) Do(r conformance.Request) (conformance.Response, error) {
	hr, err := conformance.NewHTTPRequest(r)
	if err != nil {
		return conformance.Response{}, err
	}
	var req fasthttp.Request
	req.Header.SetMethod(hr.Method)
	req.SetRequestURI(hr.URL.RequestURI())
	req.Header.SetHost(hr.Host)
	for k, vs := range hr.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(r.IP()), Port: 40000}, nil)
	i.handler(&ctx)
	res := conformance.Response{Status: ctx.Response.StatusCode(), Header: http.Header{}, Body: append([]byte(nil), ctx.Response.Body()...)}
	for k, v := range ctx.Response.Header.All() {
		res.Header.Add(string(k), string(v))
	}
	return res, nil
}

func (i *instance) HandlerCalls() int { return i.calls.Load() }

func TestConformance(t *testing.T) { conformance.Run(t, target) }
