package gqllimit

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Error codes, in extensions.code of the error of an operation that did
// not run.
const (
	// CodeThrottled: the bucket holds less than the requested cost now;
	// the operation may be retried (extensions.retryAfterSeconds).
	CodeThrottled = "THROTTLED"
	// CodeMaxCostExceeded: the requested cost is above the bucket's
	// capacity; the operation can never run as it is.
	CodeMaxCostExceeded = "MAX_COST_EXCEEDED"
	// CodeUnauthenticated: no tenant in the context.
	CodeUnauthenticated = "UNAUTHENTICATED"
	// CodeUnavailable: the limiter could not decide (the store failed
	// under a fail-closed policy, or the check was shed).
	CodeUnavailable = "SERVICE_UNAVAILABLE"
	// CodeInternal: a misconfiguration (no quota for the class, or a gate
	// built without gate.WithCostReports).
	CodeInternal = "INTERNAL_SERVER_ERROR"
	// CodeBadRequest: the request could not be checked (an invalid tenant).
	CodeBadRequest = "BAD_REQUEST"
)

// Extension is a gqlgen handler extension that charges each operation's
// cost to the tenant's bucket: the requested cost before execution, then
// settled to the actual cost after it. Add it with the server's Use
// method; one Extension serves one schema.
type Extension struct {
	g   *gate.Gate
	cfg config

	mu    sync.Mutex
	model *model // set by Validate
}

var (
	_ graphql.HandlerExtension     = (*Extension)(nil)
	_ graphql.OperationInterceptor = (*Extension)(nil)
	_ graphql.FieldInterceptor     = (*Extension)(nil)
)

// New returns the extension over g, which must be built with
// gate.WithCostReports (an operation is answered CodeInternal otherwise:
// its reservation could not be settled). A nil gate, or an option given a
// value it cannot use, panics with a message naming it; a nil option is
// skipped.
func New(g *gate.Gate, opts ...Option) *Extension {
	if g == nil {
		panic("tollgate: gqllimit.New: nil gate")
	}
	e := &Extension{g: g, cfg: defaultConfig()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&e.cfg); err != nil {
			panic("tollgate: " + strings.TrimPrefix(err.Error(), "tollgate: "))
		}
	}
	return e
}

// ExtensionName implements graphql.HandlerExtension.
func (e *Extension) ExtensionName() string { return "TollgateCost" }

// Validate implements graphql.HandlerExtension: it checks the cost
// overrides against the schema. An Extension already added to a server of
// another schema is refused.
func (e *Extension) Validate(es graphql.ExecutableSchema) error {
	s := es.Schema()
	m := &model{cfg: e.cfg, schema: s}
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.model != nil && e.model.schema != s {
		return fmt.Errorf("%w: gqllimit: the extension is already used with another schema", core.ErrInvalidConfig)
	}
	e.model = m
	return nil
}

func (e *Extension) costModel() *model {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.model
}

// opState is one operation's running account of its actual cost.
type opState struct {
	m        *model
	mutation bool
	actual   atomic.Int64
}

func (s *opState) add(n int64) {
	for {
		old := s.actual.Load()
		if s.actual.CompareAndSwap(old, add(old, n)) {
			return
		}
	}
}

type stateKey struct{}

// InterceptOperation implements graphql.OperationInterceptor: it prices
// the operation, checks it, and settles it after its last response.
func (e *Extension) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	m := e.costModel()
	oc := graphql.GetOperationContext(ctx)
	if m == nil || oc == nil || oc.Operation == nil {
		return next(ctx)
	}
	op := oc.Operation
	if e.cfg.exemptIntrospection && onlyIntrospection(op.SelectionSet) {
		return next(ctx)
	}
	requested := max(1, m.requested(op, oc.Variables))
	hs := httpStateFrom(ctx)
	if requested > quota.MaxCost {
		// no bucket may hold it: never, whatever the quota
		c := costOf(requested, nil, nil)
		hs.deny(429, nil)
		return graphql.OneShot(denial(CodeMaxCostExceeded,
			fmt.Sprintf("the operation's requested cost is above %d", int64(quota.MaxCost)), c, 0))
	}
	v := e.g.Decide(ctx, gate.Endpoint{Pattern: "graphql " + string(op.Operation), Route: gate.Route{Class: e.cfg.class, Cost: requested}})
	admitted := time.Now()
	if !v.Proceed {
		hs.deny(v.Status, v.Headers)
		c := costOf(requested, nil, throttle(v.Decision, v.Decision.Tokens))
		return graphql.OneShot(denial(code(v), message(v), c, retrySeconds(v.Decision)))
	}
	hs.admit(v.Headers)
	cctx, settleable := v.CostContext(ctx)
	if v.Decision.Settleable() && !settleable {
		v.Done()
		hs.deny(500, nil)
		return graphql.OneShot(denial(CodeInternal, "the rate limit gate was built without gate.WithCostReports: the cost could not be settled",
			costOf(requested, nil, nil), 0))
	}
	st := &opState{m: m, mutation: op.Operation == ast.Mutation}
	rh := next(context.WithValue(cctx, stateKey{}, st))
	subscription := op.Operation == ast.Subscription
	var once sync.Once
	var settled *cost
	finish := func() *cost {
		once.Do(func() {
			if subscription {
				// charged its requested cost when it began; the events are
				// not settled
				v.Done()
				settled = costOf(requested, &requested, throttle(v.Decision, v.Decision.Tokens))
				return
			}
			actual := min(max(1, st.actual.Load()), quota.MaxCost)
			if settleable {
				_ = gate.ReportCost(cctx, actual) // 1 to MaxCost: never an error
			}
			v.Done()
			d, tokens := v.Decision, after(v.Decision, requested, actual, time.Since(admitted), settleable)
			if e.cfg.readBack {
				if r := e.g.CheckRoute(ctx, v.Tenant, gate.Route{Class: e.cfg.class}); r.Decision.Reason == core.ReasonOK && len(r.Decision.Buckets) > 0 {
					d, tokens = r.Decision, r.Decision.Tokens
					hs.admit(r.Headers) // the headers say the same
				}
			}
			settled = costOf(requested, &actual, throttle(d, tokens))
		})
		return settled
	}
	return func(ctx context.Context) *graphql.Response {
		resp := rh(ctx)
		if resp == nil {
			finish()
			return nil
		}
		var c *cost
		switch {
		case subscription:
			c = costOf(requested, &requested, throttle(v.Decision, v.Decision.Tokens))
		case resp.HasNext != nil && *resp.HasNext:
			c = costOf(requested, nil, throttle(v.Decision, v.Decision.Tokens))
		default:
			c = finish()
		}
		if resp.Extensions == nil {
			resp.Extensions = map[string]any{}
		}
		resp.Extensions["cost"] = c
		return resp
	}
}

// InterceptField implements graphql.FieldInterceptor: it adds what a
// resolved field cost to its operation's actual cost.
func (e *Extension) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	st, _ := ctx.Value(stateKey{}).(*opState)
	if st == nil {
		return next(ctx)
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || fc.Field.Definition == nil {
		return next(ctx)
	}
	def := fc.Field.Definition
	if st.m.cfg.exemptIntrospection && isIntrospection(def.Name) {
		// its subtree is free
		return next(context.WithValue(ctx, stateKey{}, (*opState)(nil)))
	}
	res, err := next(ctx)
	root := st.mutation && st.m.schema.Mutation != nil && fc.Object == st.m.schema.Mutation.Name && len(fc.Path()) == 1
	per := st.m.perValue(selectedOn(fc.Field.Field, fc.Object), def, root)
	n := int64(1)
	if !root {
		// a mutation ran whatever it returned; any other field is charged
		// per value returned
		n = valueCount(res, def.Type.Elem != nil)
	}
	st.add(mul(n, per))
	return res, err
}

// cost is extensions.cost, in Shopify's shape.
type cost struct {
	RequestedQueryCost int64           `json:"requestedQueryCost"`
	ActualQueryCost    *int64          `json:"actualQueryCost"`
	ThrottleStatus     *throttleStatus `json:"throttleStatus,omitempty"`
}

type throttleStatus struct {
	MaximumAvailable   int64   `json:"maximumAvailable"`
	CurrentlyAvailable int64   `json:"currentlyAvailable"`
	RestoreRate        float64 `json:"restoreRate"`
}

func costOf(requested int64, actual *int64, t *throttleStatus) *cost {
	return &cost{RequestedQueryCost: requested, ActualQueryCost: actual, ThrottleStatus: t}
}

// throttle is the throttle status of d's binding bucket holding tokens;
// nil when d carries no bucket numbers (failed open, shadow, no check).
func throttle(d core.Decision, tokens float64) *throttleStatus {
	if d.Limit <= 0 || d.Degraded() || len(d.Buckets) == 0 {
		return nil
	}
	return &throttleStatus{
		MaximumAvailable:   d.Limit,
		CurrentlyAvailable: max(0, int64(math.Floor(tokens))),
		RestoreRate:        d.Quota.RefillPerSecond,
	}
}

// after is the binding bucket's balance once the settle ran: the balance
// the admission left, refilled for elapsed (capped at capacity), then
// refunded requested - actual (capped again) or charged the difference,
// as the settle script does. The lowest over the decision's buckets.
func after(d core.Decision, requested, actual int64, elapsed time.Duration, settled bool) float64 {
	diff := float64(requested - actual)
	if !settled {
		diff = 0
	}
	low := math.Inf(1)
	for _, b := range d.Buckets {
		c := float64(b.Quota.Capacity)
		t := min(c, b.Tokens+b.Quota.RefillPerSecond*elapsed.Seconds())
		t = min(c, t+diff)
		low = min(low, t)
	}
	if math.IsInf(low, 1) {
		return d.Tokens
	}
	return low
}

func code(v gate.Verdict) string {
	switch {
	case v.Unauthenticated:
		return CodeUnauthenticated
	case v.Decision.Reason == core.ReasonCostExceedsCapacity:
		return CodeMaxCostExceeded
	case v.Decision.Denied():
		return CodeThrottled
	case v.Status == 503:
		return CodeUnavailable
	case v.Status == 400:
		return CodeBadRequest
	default:
		return CodeInternal
	}
}

func message(v gate.Verdict) string {
	if v.Decision.Reason == core.ReasonCostExceedsCapacity {
		return fmt.Sprintf("the operation's requested cost %d is above the bucket's capacity %d: it can never run as it is", v.Decision.Cost, v.Decision.Limit)
	}
	if v.Problem.Detail != "" {
		return v.Problem.Detail
	}
	if v.Problem.Title != "" {
		return v.Problem.Title
	}
	return "the operation was not admitted"
}

func retrySeconds(d core.Decision) int64 {
	if d.Reason != core.ReasonOverLimit && d.Reason != core.ReasonConcurrencyLimit {
		return 0
	}
	return max(1, int64(math.Ceil(d.RetryAfter.Seconds())))
}

// denial is the response of an operation that did not run.
func denial(code, msg string, c *cost, retry int64) *graphql.Response {
	ext := map[string]any{"code": code, "cost": c}
	if retry > 0 {
		ext["retryAfterSeconds"] = retry
	}
	return &graphql.Response{
		Errors:     gqlerror.List{{Message: msg, Extensions: ext}},
		Extensions: map[string]any{"cost": c},
	}
}
