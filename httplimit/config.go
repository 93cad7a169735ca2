package httplimit

import (
	"net/http"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Option configures the middleware. Options are applied in order; a nil
// Option is skipped. An option given a value it cannot use (a nil
// function) makes Middleware panic with a message naming it, where the
// limiter is registered. Everything core decides (routes, default route,
// cost function, header style, anonymous callers) is configured on the
// gate.Gate instead.
type Option = adapt.Option[*http.Request, denyHandler]

type (
	config      = adapt.Config[*http.Request, denyHandler]
	denyHandler = func(http.ResponseWriter, *http.Request, gate.Verdict)
)

// WithRouteFunc sets how a request's class and cost are named from the
// request itself (its size, a header the authentication layer set),
// consulted before the gate's cost function and route table (ok false
// falls back to them). Its answer is held to the route table's rules: a
// bad one is answered as a misconfiguration. Default: none. nil is an error.
func WithRouteFunc(f func(*http.Request) (gate.Route, bool)) Option {
	return adapt.RouteFunc[*http.Request, denyHandler]("httplimit.WithRouteFunc", f)
}

// WithSkipper skips the limiter (no check, no headers) for requests it
// returns true for. Default: none. nil is an error.
func WithSkipper(f func(*http.Request) bool) Option {
	return adapt.Skipper[*http.Request, denyHandler]("httplimit.WithSkipper", f)
}

// WithPatternFunc sets how the route template of a request is found, for
// routers other than ServeMux (chi: chi.RouteContext(r.Context()).RoutePattern(),
// with the middleware mounted where the route is resolved). Never return the
// raw URL path: every distinct path would be a route of its own. Default:
// when the middleware wraps a *http.ServeMux directly, the pattern that mux
// routes r to (a request it has none for, its 404 or 405, is charged
// nothing); otherwise r.Pattern without its method. nil is an error.
func WithPatternFunc(f func(*http.Request) string) Option {
	return adapt.PatternFunc[*http.Request, denyHandler]("httplimit.WithPatternFunc", f)
}

// WithDenyHandler sets what answers a request that does not proceed (429,
// 503, 401, 400; 500 when misconfigured). The rate-limit headers are
// already set on w. Default: DefaultDenyHandler (core's RFC 9457
// problem+json). nil is an error.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, v gate.Verdict)) Option {
	return adapt.DenyHandler[*http.Request, denyHandler]("httplimit.WithDenyHandler", f)
}

// WithErrorHandler sets a hook called with Verdict.Err whenever the limiter
// reports an error (the store failed, or the request could not be keyed),
// before the failure policy's answer is rendered; and with the cause of a
// misconfiguration (a route function's bad route), which the
// client never sees. Use it for logs and metrics. Default: none (core logs
// degraded decisions). nil is an error.
func WithErrorHandler(f func(r *http.Request, err error)) Option {
	return adapt.ErrorHandler[*http.Request, denyHandler]("httplimit.WithErrorHandler", f)
}

// WithCostHeader names a response header (such as "Tollgate-Cost") in which
// the handler may report the request's actual cost, a decimal integer, as
// an alternative to gate.ReportCost on the request's context: the
// middleware reads and removes it before the response header is written
// (at the first WriteHeader, Write or Flush, or when the handler returns),
// so the client never sees it, and the request's reservation is settled to
// that cost when the handler returns. A value that is not an integer from 0
// to quota.MaxCost is removed and ignored (the estimate, or an earlier
// ReportCost, stands) and reported to the error handler. With it the
// handler's ResponseWriter is wrapped (Flush and http.ResponseController
// reach the original; a type assertion to http.Hijacker does not). Default:
// none. A name that is not an HTTP header name ("" included) is an error.
func WithCostHeader(name string) Option {
	return adapt.CostHeader[*http.Request, denyHandler]("httplimit.WithCostHeader", name)
}
