package conformance

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	tgrender "github.com/tollgate-go/tollgate/core/render"
)

// Protocol says which of the suite's checks apply to a target.
type Protocol uint8

const (
	// ProtocolHTTP targets (net/http, Gin, Echo, Fiber, ...) are held to
	// everything: status, every rate-limit header, Retry-After,
	// Content-Type and the body, byte for byte.
	ProtocolHTTP Protocol = iota + 1
	// ProtocolGRPC targets are held to the subset that applies to gRPC:
	// the status (normalised, see [Response]), the RateLimit,
	// RateLimit-Policy and Retry-After values, the keys in Redis and the
	// handler's call count. Bodies, Content-Type and the X-RateLimit and
	// draft-06 families are not compared.
	ProtocolGRPC
)

// String returns "http" or "grpc".
func (p Protocol) String() string {
	switch p {
	case ProtocolHTTP:
		return "http"
	case ProtocolGRPC:
		return "grpc"
	}
	return "unknown"
}

// Target is an adapter under test: a factory of running instances (shape:
// golang.org/x/net/nettest's MakePipe). The suite builds the limiter, the
// target builds its framework's handler around it.
type Target interface {
	// Protocol says which checks apply.
	Protocol() Protocol
	// NewInstance builds one instance of a service protected by the
	// adapter under test, configured from s:
	//
	//  1. a test authentication layer that reads the identity the suite
	//     sends (see [Request.Authorization] and [Authenticate]) and puts
	//     it in the request context with gate.ContextWithTenant, exactly
	//     where a real auth middleware would; it rejects nothing, so a
	//     request without identity reaches the limiter without a tenant;
	//  2. the adapter, built over s.Limiter with s's routes, header style,
	//     anonymous option, clock and error hook;
	//  3. one handler per endpoint of [Endpoints] that counts its calls
	//     (Instance.HandlerCalls), reports the request's actual cost when
	//     the request asks for it ([ReportActualCost]) and answers 200.
	//
	// The scenario may call it several times with the same limiter
	// configuration (simulated replicas). Release resources with
	// t.Cleanup. An error fails the scenario.
	NewInstance(t testing.TB, s Setup) (Instance, error)
}

// Instance is one running service built by a Target.
type Instance interface {
	// Do sends one request and returns the normalised response. It must be
	// safe for concurrent use. An error means the request could not be
	// sent at all (not an error status: a 429 is a Response).
	Do(r Request) (Response, error)
	// HandlerCalls is the number of times the service's own handlers ran
	// (the limiter's denials must not reach them).
	HandlerCalls() int
}

// Setup is what a target gets to build an instance.
type Setup struct {
	// Limiter is the limiter to protect the service with. The suite built
	// it (tiers, failure policy, timeout, Redis client, key prefix, shadow
	// mode, client clock); the target only passes it on.
	Limiter *core.Limiter
	// Routes maps endpoint names (EndpointProfile, EndpointExport,
	// EndpointHealth, EndpointItem) to their class and cost. The target
	// turns them into the adapter's route table under its own route
	// templates (see [HTTPRoutes]).
	Routes map[string]gate.Route
	// HeaderStyle is the header style to configure (gate.WithHeaderStyle).
	HeaderStyle tgrender.HeaderStyle
	// Anonymous, when set, admits callers without identity as anonymous
	// tenants keyed by the client address the framework resolves
	// (gate.WithAnonymous("")), instead of answering 401.
	Anonymous bool
	// OnError is the adapter's error hook: wire it so that it receives
	// Verdict.Err whenever the limiter reports an error (store failure).
	// Never nil.
	OnError func(error)
	// CostReports is set for the settle scenarios: the handlers report
	// what a request really cost ([ActualCostHeader]), so the gate must
	// take reports (gate.WithCostReports(); GateOptions adds it). A target
	// that cannot settle a reservation (a gateway that only checks) returns
	// [ErrNoCostReports] from NewInstance, and those scenarios are skipped
	// for it.
	CostReports bool
	// CatchAll is set for the catch-all scenario: the service also
	// registers, after its endpoints, the handler its framework runs for a
	// request no route of the service matches (Gin's NoRoute, Echo's
	// RouteNotFound("/*"), a ServeMux "/" pattern, a Fiber app.Use after
	// the routes, gRPC's grpc.UnknownServiceHandler), behind the adapter as
	// the endpoints are. Like theirs, it counts its calls and answers 200
	// (gRPC: OK). Such a handler runs the service's code, so the limiter
	// must charge its requests as the default route.
	CatchAll bool
}

// GateOptions returns s as core gate options, with routes as the route
// table: what most adapters' "pass gate options through" option takes.
func (s Setup) GateOptions(routes gate.Routes) []gate.Option {
	opts := []gate.Option{gate.WithRoutes(routes), gate.WithHeaderStyle(s.HeaderStyle)}
	if s.Anonymous {
		opts = append(opts, gate.WithAnonymous(""))
	}
	if s.CostReports {
		opts = append(opts, gate.WithCostReports())
	}
	return opts
}

// Endpoint names: the abstract endpoints every target serves.
const (
	// EndpointProfile is a cheap read: HTTP GET /v1/profile.
	EndpointProfile = "profile"
	// EndpointExport is an expensive call: HTTP POST /v1/reports/export.
	EndpointExport = "export"
	// EndpointHealth is a health check, exempt from limiting: HTTP GET
	// /healthz.
	EndpointHealth = "health"
	// EndpointItem has a path parameter: HTTP GET /v1/items/{id}. Requests
	// to different items must share one route (template, never raw URL).
	EndpointItem = "item"
	// EndpointUnrouted is a path no target serves: HTTP GET /v1/unrouted
	// (with a Param, /v1/unrouted/<param>), under the /v1 prefix of the
	// routes that exist; gRPC: the method Call of a service no target
	// registers, UnroutedMethod. It is not in HTTPEndpoints (targets
	// register no route for it): the framework answers it 404 (gRPC:
	// Unimplemented, which no interceptor sees) and the limiter must
	// charge nothing, unless the service registered a catch-all handler
	// (Setup.CatchAll), which answers it and is charged.
	EndpointUnrouted = "unrouted"
)

// HTTPEndpoint is an endpoint's HTTP route.
type HTTPEndpoint struct {
	Method string
	// Path is the route template in net/http ServeMux syntax
	// ("/v1/items/{id}").
	Path string
}

// ColonPath returns the template in Gin, Echo and Fiber syntax
// ("/v1/items/:id").
func (e HTTPEndpoint) ColonPath() string {
	segs := strings.Split(e.Path, "/")
	for i, seg := range segs {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			segs[i] = ":" + seg[1:len(seg)-1]
		}
	}
	return strings.Join(segs, "/")
}

// URL returns the request path for param (the value of the template's
// parameter, if any).
func (e HTTPEndpoint) URL(param string) string {
	i := strings.IndexByte(e.Path, '{')
	if i < 0 {
		return e.Path
	}
	j := strings.IndexByte(e.Path[i:], '}')
	return e.Path[:i] + url.PathEscape(param) + e.Path[i+j+1:]
}

// HTTPEndpoints maps each endpoint name to its HTTP route. Every HTTP
// target serves exactly these (EndpointUnrouted is none of them).
var HTTPEndpoints = map[string]HTTPEndpoint{
	EndpointProfile: {http.MethodGet, "/v1/profile"},
	EndpointExport:  {http.MethodPost, "/v1/reports/export"},
	EndpointHealth:  {http.MethodGet, "/healthz"},
	EndpointItem:    {http.MethodGet, "/v1/items/{id}"},
}

// UnroutedMethod is the gRPC full method of EndpointUnrouted: a service
// no target registers.
const UnroutedMethod = "/tollgate.conformance.Unrouted/Call"

// unroutedEndpoint is where the suite sends EndpointUnrouted requests.
var unroutedEndpoint = HTTPEndpoint{http.MethodGet, "/v1/unrouted"}

// httpEndpoint returns the HTTP route of an endpoint name, EndpointUnrouted
// included (its Param, when set, one more path segment).
func httpEndpoint(name, param string) (HTTPEndpoint, bool) {
	if name == EndpointUnrouted {
		if param != "" {
			return HTTPEndpoint{unroutedEndpoint.Method, unroutedEndpoint.Path + "/{param}"}, true
		}
		return unroutedEndpoint, true
	}
	e, ok := HTTPEndpoints[name]
	return e, ok
}

// HTTPRoutes turns routes (by endpoint name) into a core route table keyed
// "METHOD template", where template renders an endpoint's route template in
// the framework's syntax (HTTPEndpoint.ColonPath for Gin, Echo and Fiber;
// nil keeps the ServeMux syntax). Names that are not HTTP endpoints are
// ignored.
func HTTPRoutes(routes map[string]gate.Route, template func(HTTPEndpoint) string) gate.Routes {
	if template == nil {
		template = func(e HTTPEndpoint) string { return e.Path }
	}
	rs := gate.Routes{}
	for name, r := range routes {
		if e, ok := HTTPEndpoints[name]; ok {
			rs[e.Method+" "+template(e)] = r
		}
	}
	return rs
}

// Request is one request the suite sends.
type Request struct {
	// Endpoint names the endpoint (EndpointProfile, ...).
	Endpoint string
	// Param is the path parameter of an endpoint that has one (EndpointItem).
	Param string
	// Method, when set, replaces the endpoint's HTTP method: HEAD of a GET
	// route, or a method the route does not serve. HTTP targets only.
	Method string
	// Tenant and Tier are the identity the caller presents; an empty
	// Tenant sends no identity.
	Tenant, Tier string
	// Header holds extra headers (gRPC: metadata) the client sets, such as
	// a forged X-Tenant-Id. Canonical names.
	Header map[string]string
	// ClientIP is the caller's address. Targets make their framework
	// resolve it as the client IP (the remote address of the connection,
	// never a forwarding header). Empty means 198.51.100.1.
	ClientIP string
}

// DefaultClientIP is the caller's address when Request.ClientIP is empty.
const DefaultClientIP = "198.51.100.1"

// IP returns r.ClientIP or DefaultClientIP.
func (r Request) IP() string {
	if r.ClientIP == "" {
		return DefaultClientIP
	}
	return r.ClientIP
}

// AuthorizationPrefix starts the test credential the suite sends.
const AuthorizationPrefix = "Bearer test:"

// Authorization returns the Authorization header (gRPC: "authorization"
// metadata) that presents r's identity, or "" when r has none:
// "Bearer test:<tenant>:<tier>", both parts URL-query-escaped.
func (r Request) Authorization() string {
	if r.Tenant == "" {
		return ""
	}
	return AuthorizationPrefix + url.QueryEscape(r.Tenant) + ":" + url.QueryEscape(r.Tier)
}

// Authenticate is the test authentication layer's verifier: it decodes an
// Authorization value made by Request.Authorization. A target's auth
// middleware calls it and, when ok, stores the tenant with
// gate.ContextWithTenant.
func Authenticate(authorization string) (quota.Tenant, bool) {
	rest, ok := strings.CutPrefix(authorization, AuthorizationPrefix)
	if !ok {
		return quota.Tenant{}, false
	}
	id, tier, ok := strings.Cut(rest, ":")
	if !ok {
		return quota.Tenant{}, false
	}
	var err1, err2 error
	t := quota.Tenant{}
	t.ID, err1 = url.QueryUnescape(id)
	t.Tier, err2 = url.QueryUnescape(tier)
	if err1 != nil || err2 != nil || t.ID == "" {
		return quota.Tenant{}, false
	}
	return t, true
}

// Response is a normalised response.
//
// HTTP targets return the status, headers and body as sent. gRPC targets
// map the status code to HTTP (OK 200, ResourceExhausted 429, Unavailable
// 503, Unauthenticated 401, InvalidArgument 400, anything else 500) and put
// header and trailer metadata in Header under canonical HTTP names
// (http.CanonicalHeaderKey). The suite keeps only the rate-limit headers,
// Retry-After and Content-Type (see [RelevantHeaders]) and compares names
// case-insensitively.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}
