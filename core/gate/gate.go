package gate

import (
	"context"
	"fmt"
	"maps"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/anon"
	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// Endpoint is what an adapter knows about a request before the handler runs.
type Endpoint struct {
	// Method is the HTTP method; empty for gRPC.
	Method string
	// Pattern is the route template or the gRPC full method.
	Pattern string
	// ClientIP is the caller's address as the framework resolved it; used
	// only for anonymous callers (WithAnonymous).
	ClientIP string
	// Unmatched says the framework matched no route of the service. Set
	// it only when the framework says so: a request whose route the
	// adapter merely cannot name is charged as the default route. Unless
	// Fallback is set too, the framework answers the request 404 or 405
	// itself, and it is charged nothing and gets no rate-limit headers,
	// whoever sends it (see Routed).
	Unmatched bool
	// Fallback says a handler of the service answers a request no route
	// matched: a catch-all the service registered for what its routes do
	// not match (Gin's NoRoute and NoMethod handlers, Echo's RouteNotFound
	// routes and not-found handlers). The service's code runs, so the
	// request is charged, as the default route: the route table is not
	// consulted (Pattern names no route of it), a cost function or an
	// adapter's route function may still name a route.
	Fallback bool
	// Route, when not the zero Route, is the request's class and cost as
	// the adapter already resolved it (an adapter's framework-typed route
	// function): the gate uses it instead of its cost function and route
	// table, held to the same rules (a bad one is a misconfiguration).
	Route Route
}

// CostFunc decides a request's class and cost dynamically. ok false falls
// back to the route table. Its answer is held to the route table's rules
// (a valid class name, 1 <= Cost <= quota.MaxCost, unless Exempt): a bad one
// fails the request as a misconfiguration (500, gRPC Internal, reported to
// the adapter's error hook), never a free pass. A cost that rounds down to
// 0 (bytes / 1 MiB) must be clamped to 1 by the function.
type CostFunc func(ctx context.Context, t quota.Tenant, e Endpoint) (r Route, ok bool)

// Gate is the request flow every adapter shares: find the tenant (from the
// context, never from a header the client sets), map the route to a class
// and cost, check, and render the answer (status, headers, problem body).
// Adapters call Decide before the handler and only translate the Verdict.
type Gate struct {
	lim       *core.Limiter
	routes    Routes
	fallback  Route
	costFunc  CostFunc
	style     render.HeaderStyle
	anonTier  string
	anonymous bool
	reports   bool // WithCostReports
	hold      holds
}

// Option configures a Gate. One given a value it cannot use makes New fail
// with an error naming it and wrapping core.ErrInvalidConfig.
type Option interface{ applyGate(*Gate) error }

type gateOptionFunc func(*Gate) error

func (f gateOptionFunc) applyGate(g *Gate) error { return f(g) }

// WithRoutes sets the route table; every entry must be valid (see
// Routes.Validate). The Gate keeps a copy: a change to rs after New does
// not reach it. Default: none (every route is the default route).
func WithRoutes(rs Routes) Option {
	return gateOptionFunc(func(g *Gate) error {
		if err := rs.Validate(); err != nil {
			return errs.BadValue("gate.WithRoutes", err)
		}
		if rs != nil {
			// the table is validated here, once: Decide takes its routes
			// as they are, so no one may change them after
			g.routes = maps.Clone(rs)
		}
		return nil
	})
}

// WithDefaultRoute sets the class and cost of routes not in the table.
// Default: class "default", cost 1.
func WithDefaultRoute(r Route) Option {
	return gateOptionFunc(func(g *Gate) error {
		if err := (Routes{"default route": r}).Validate(); err != nil {
			return errs.BadValue("gate.WithDefaultRoute", err)
		}
		g.fallback = r
		return nil
	})
}

// WithCostFunc sets a dynamic class/cost decision, consulted before the
// route table. nil is an error. Default: none (the route table decides).
func WithCostFunc(f CostFunc) Option {
	return gateOptionFunc(func(g *Gate) error {
		if f == nil {
			return errs.BadOption("gate.WithCostFunc", "nil function")
		}
		g.costFunc = f
		return nil
	})
}

// WithHeaderStyle selects the rate-limit header families. Default
// render.DefaultHeaderStyle (IETF draft-11 and X-RateLimit).
func WithHeaderStyle(s render.HeaderStyle) Option {
	return gateOptionFunc(func(g *Gate) error {
		if err := s.Validate(); err != nil {
			return errs.BadOption("gate.WithHeaderStyle", "%v", err)
		}
		g.style = s
		return nil
	})
}

// WithCostReports lets handlers report a request's actual cost
// (ReportCost, or an adapter's cost header): the route's cost is then a
// reservation, settled when the handler returns (Verdict.Done), as
// https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#reserve-then-settle says. Default off: a request
// costs what its route says, and carries nothing to settle (no allocation
// for it, and ReportCost reports an error).
func WithCostReports() Option {
	return gateOptionFunc(func(g *Gate) error {
		g.reports = true
		return nil
	})
}

// WithAnonymous admits callers with no tenant in the context as tenant
// "anonymous:<client IP>" on tier (default "anonymous"), instead of
// answering 401. An IPv6 caller is keyed by its /64 network. The tier must
// exist in the resolver; a TieredResolver serves it from the tier defaults
// only (no override lookup per new address). Verified tenant IDs of that
// form are refused (see Decide), so the two never share a bucket. Default
// off: a request with no tenant is answered 401.
func WithAnonymous(tier string) Option {
	return gateOptionFunc(func(g *Gate) error {
		g.anonymous = true
		g.anonTier = tier
		if tier == "" {
			g.anonTier = "anonymous"
		}
		return nil
	})
}

// New returns the shared request flow over l.
func New(l *core.Limiter, opts ...Option) (*Gate, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil core.Limiter", core.ErrInvalidConfig)
	}
	g := &Gate{lim: l, fallback: Route{Class: quota.DefaultClass, Cost: 1}, style: render.DefaultHeaderStyle}
	g.hold.max = DefaultMaxHolds
	for _, o := range opts {
		if o != nil {
			if err := o.applyGate(g); err != nil {
				return nil, err
			}
		}
	}
	if err := g.routes.Validate(); err != nil {
		return nil, err
	}
	if err := (Routes{"default route": g.fallback}).Validate(); err != nil {
		return nil, err
	}
	return g, nil
}

// Route returns the class and cost of a request to e by tenant t:
// e.Route when set, else the cost function's answer, else the route
// table's (never for a fallback, Endpoint.Fallback), else the default
// route.
func (g *Gate) Route(ctx context.Context, t quota.Tenant, e Endpoint) Route {
	if r, given := g.givenRoute(ctx, t, e); given {
		return r
	}
	if r, ok := g.routes.lookup(e); ok {
		return r
	}
	return g.fallback
}

// givenRoute returns the route given for a request rather than configured:
// e.Route when set, else the cost function's answer; given false when
// neither names one. A given route is checked per request (validRoute);
// the route table and the default route were checked by New.
func (g *Gate) givenRoute(ctx context.Context, t quota.Tenant, e Endpoint) (r Route, given bool) {
	if e.Route != (Route{}) {
		return e.Route, true
	}
	if g.costFunc != nil {
		if r, ok := g.costFunc(ctx, t, e); ok {
			return r, true
		}
	}
	return Route{}, false
}

// Decide checks one request. ctx carries the tenant (ContextWithTenant).
// A verified tenant whose ID begins with "anonymous:", the form of an
// anonymous caller's ID (WithAnonymous), is refused as an invalid request
// (400, Err wrapping core.ErrInvalidRequest) whether or not this Gate admits
// anonymous callers: it would share that caller's bucket.
//
// A request that reaches no handler of the service (Endpoint.Routed false:
// the framework's own 404 or 405) proceeds unchecked: no route, no charge.
// One a fallback handler of the service answers (Endpoint.Fallback) is
// charged as the default route.
//
// It looks the route table up once, for the exemption and for the route
// (Route's answer), and checks per request only a route given by the
// adapter or the cost function. A request of a class held by WithHold may
// wait here, up to the class's max wait, before the Verdict is returned.
func (g *Gate) Decide(ctx context.Context, e Endpoint) Verdict {
	if !e.Routed() {
		return Verdict{Proceed: true, Unmatched: true}
	}
	// an exempt route (health, metrics) needs no identity
	table, inTable := g.routes.lookup(e)
	if inTable && table.Exempt {
		return Verdict{Proceed: true, Route: table}
	}
	t, verified := TenantFromContext(ctx)
	if !verified {
		if !g.anonymous || e.ClientIP == "" {
			// the challenge of a 401 (RFC 9110 §11.6.1): Bearer, the scheme
			// a tenant identity is verified from
			p := render.UnauthenticatedProblem()
			return Verdict{Status: p.Status, ContentType: render.ProblemContentType, Body: p.JSON(), Problem: p, Unauthenticated: true,
				Headers: []render.Header{{Name: "WWW-Authenticate", Value: "Bearer"}}}
		}
		t = quota.Tenant{ID: anon.ID(e.ClientIP), Tier: g.anonTier}
	}
	r, given := g.givenRoute(ctx, t, e)
	switch {
	case given:
	case inTable:
		r = table
	default:
		r = g.fallback
	}
	if r.Exempt {
		return Verdict{Proceed: true, Tenant: t, Route: r}
	}
	if given {
		if err := validRoute(r); err != nil {
			p := render.MisconfiguredProblem()
			return Verdict{Status: p.Status, ContentType: render.ProblemContentType, Body: p.JSON(), Problem: p,
				Decision: core.Decision{Reason: core.ReasonUnresolved, Cost: r.Cost}, Tenant: t, Route: r,
				Err: fmt.Errorf("%w: cost function: %w", core.ErrInvalidConfig, err)}
		}
	}
	if verified && anon.Is(t.ID) {
		// anonymous callers' IDs: a verified tenant spelled like one would
		// share that caller's bucket (and deny cache entry), each draining
		// the other's quota
		return g.render(t, r, core.Decision{Reason: core.ReasonInvalid, Cost: r.Cost},
			fmt.Errorf("%w: tenant ID %s begins with %q, which is kept for anonymous callers", core.ErrInvalidRequest, keys.EscapeID(t.ID), anon.Prefix))
	}
	d, held, err := g.check(ctx, t, r)
	v := g.render(t, r, d, err)
	if held > 0 {
		v.Held = held
		v.Headers = append(v.Headers, heldHeader(held))
	}
	return v
}

// CheckRoute checks one unit of work whose tenant and route are already known
// (for example one more message on a stream Decide admitted): it charges
// r.Cost to tenant t's r.Class buckets and renders the answer.
func (g *Gate) CheckRoute(ctx context.Context, t quota.Tenant, r Route) Verdict {
	d, err := g.lim.Check(ctx, core.Request{Tenant: t, Class: r.Class, Cost: r.Cost})
	return g.render(t, r, d, err)
}

// render turns the limiter's answer for (t, r) into a Verdict.
func (g *Gate) render(t quota.Tenant, r Route, d core.Decision, err error) Verdict {
	v := Verdict{Proceed: d.Allowed, Decision: d, Tenant: t, Route: r, Checked: true, Err: err,
		Headers: render.Headers(d, g.style, g.lim.Now())}
	if g.reports && d.Settleable() {
		v.report = &costReport{lim: g.lim}
	}
	if !d.Allowed {
		v.Status = render.Status(d)
		v.Problem = render.ProblemOf(d)
		v.ContentType = render.ProblemContentType
		v.Body = v.Problem.JSON()
	}
	return v
}
