package rls

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Server is an Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) over a core.Limiter.
// Register it with rlsv3.RegisterRateLimitServiceServer. It is safe for
// concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim  *core.Limiter
	cfg  config
	held holder // the slots hits took (WithSlotHold)
}

// New returns a Server answering from lim, or an error naming a bad option.
func New(lim *core.Limiter, opts ...Option) (*Server, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: rls: nil limiter", core.ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Server{lim: lim, cfg: cfg}, nil
}

// descriptor is one request descriptor, read.
type descriptor struct {
	tenant quota.Tenant
	class  string
	cost   int64
	// negative: is_negative_hits, a refund or a slot's end
	negative bool
	// invalid, when set, is why the descriptor cannot be checked.
	invalid string
}

// group is the descriptors of one tenant (and tier), whatever their
// costs, decided in one script call: all-or-nothing.
type group struct {
	tenant  quota.Tenant
	classes []string // distinct, in first-seen order
	costs   []int64  // each class's cost: the sum of its descriptors' distinct costs
	members []int    // descriptor indexes
	d       core.Decision
	err     error

	// resolved is the buckets of the classes the rules resolve (see
	// core.Request's Resolved); nil: the limiter's resolver answers them
	resolved [][]quota.Bucket
}

// ShouldRateLimit decides every descriptor of req. See the package
// documentation for the mapping.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.cfg.rules != nil {
		return s.shouldRateLimitRules(ctx, req)
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "tollgate: a rate limit request needs at least one descriptor")
	}
	descs := make([]descriptor, len(ds))
	invalid := false
	for i, d := range ds {
		descs[i] = s.read(d, req.GetHitsAddend(), len(ds))
		invalid = invalid || descs[i].invalid != ""
	}
	if invalid {
		return invalidAnswer(len(descs), func(i int) string { return descs[i].invalid }), nil
	}
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}

	for i, d := range descs {
		if d.negative {
			res.Statuses[i] = s.negative(ctx, d.tenant, d.class, d.cost, nil)
		}
	}
	groups := groupDescriptors(descs)
	var headline *group
	if len(groups) == 0 { // negative hits only
		return res, nil
	}
	for _, g := range groups {
		if err := s.decide(ctx, g); err != nil {
			return nil, err
		}
		if headline == nil || outranks(g.d, headline.d) {
			headline = g
		}
		for _, i := range g.members {
			st := descriptorStatus(g, descs[i].class)
			if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			res.Statuses[i] = st
		}
	}
	s.addHeaders(res, headline.d)
	return res, nil
}

// addHeaders adds the headers (and on a denial the body) the HTTP adapters
// send for d.
func (s *Server) addHeaders(res *rlsv3.RateLimitResponse, d core.Decision) {
	if h := s.cfg.limitHdrs; h != nil {
		h.add(res)
		return
	}
	for _, h := range render.Headers(d, s.cfg.style, s.lim.Now()) {
		res.ResponseHeadersToAdd = append(res.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Name, Value: h.Value})
	}
	if res.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && d.Denied() {
		res.RawBody = render.ProblemOf(d).JSON()
		res.ResponseHeadersToAdd = append(res.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "Content-Type", Value: render.ProblemContentType})
	}
}

// read maps one descriptor to a tenant, class and cost.
func (s *Server) read(d *ratelimitv3.RateLimitDescriptor, hits uint32, n int) descriptor {
	var out descriptor
	if n > MaxDescriptors {
		out.invalid = fmt.Sprintf("%d descriptors in one request, more than %d", n, MaxDescriptors)
		return out
	}
	var seen [3]bool
	for _, e := range d.GetEntries() {
		var i int
		switch e.GetKey() {
		case KeyTenant:
			i, out.tenant.ID = 0, e.GetValue()
		case KeyTier:
			if !s.cfg.trustTier {
				continue // the tenant's tier is the tier file's default
			}
			i, out.tenant.Tier = 1, e.GetValue()
		case KeyClass:
			i, out.class = 2, e.GetValue()
		default:
			continue
		}
		if seen[i] {
			out.invalid = fmt.Sprintf("entry %q given twice", e.GetKey())
			return out
		}
		seen[i] = true
	}
	if !seen[2] {
		out.class = quota.DefaultClass
	}
	// as the reference: the descriptor's hits_addend where set, 0 included
	// (a check that charges nothing), else the request's, at least 1
	cost := uint64(max(1, hits))
	if d.GetHitsAddend() != nil {
		cost = d.GetHitsAddend().GetValue()
	}
	switch {
	case !seen[0]:
		out.invalid = "no " + KeyTenant + " entry"
	case cost > uint64(s.cfg.maxCost):
		out.invalid = fmt.Sprintf("hits_addend must be 0 to %d, got %d", s.cfg.maxCost, cost)
	default:
		// the key scheme validates the tenant ID
		if err := quota.ValidateName(out.class); err != nil {
			out.invalid = err.Error()
		} else if _, err := s.lim.Keys().Bucket(out.tenant.ID, out.class); err != nil {
			out.invalid = err.Error()
		} else if why := s.unknown(out.tenant.Tier, out.class); why != "" {
			// never a metric label or a resolver call for a name the tier
			// file does not define
			out.invalid = why
		}
	}
	out.cost = int64(cost)
	out.negative = d.GetIsNegativeHits()
	return out
}

// unknown says why tier or class is not the tier file's (WithTiers), or "".
func (s *Server) unknown(tier, class string) string {
	if s.cfg.tiers == nil {
		return ""
	}
	ts := s.cfg.tiers.Tiers()
	if tier != "" {
		if _, ok := ts.Tiers[tier]; !ok {
			return "unknown tier"
		}
	}
	for _, t := range ts.Tiers {
		if _, ok := t.Classes[class]; ok {
			return ""
		}
	}
	return "unknown class"
}

// groupDescriptors groups valid descriptors by tenant (and tier), whatever
// their hits_addend, in first-seen order: one tenant's descriptors are
// decided all-or-nothing in one script call, each class charged its own
// cost. A class named twice at one cost is one bucket, charged once; named
// at different costs, it is charged their sum (see grouper.add).
func groupDescriptors(descs []descriptor) []*group {
	var gr grouper[quota.Tenant]
	for i, d := range descs {
		if !d.negative {
			gr.add(d.tenant, d.tenant, d.cost, d.class, i)
		}
	}
	return gr.groups
}

// request is g's check: Cost the first class's, AlsoCosts the others'
// (nil when every class costs the same: the common path).
// decide checks g's request and keeps the decision in g; the error is the
// call's answer when the store cannot decide and the policy is fail closed.
func (s *Server) decide(ctx context.Context, g *group) error {
	g.d, g.err = s.lim.Check(ctx, g.request())
	// a slot taken is held until the request's negative hit frees it, or
	// for the hold time (WithSlotHold; without it, freed at once); a hit
	// that charged nothing is owed its negative hit
	s.settled(g)
	if g.err != nil && s.cfg.onError != nil {
		s.cfg.onError(ctx, g.err)
	}
	if g.d.Reason == core.ReasonFailedClosed {
		return status.Error(codes.Unavailable, "tollgate: the rate limiter cannot reach its store")
	}
	return nil
}

func (g *group) request() core.Request {
	req := core.Request{Tenant: g.tenant, Class: g.classes[0], Also: g.classes[1:], Cost: g.costs[0], Resolved: g.resolved}
	for _, c := range g.costs[1:] {
		if c != req.Cost {
			req.AlsoCosts = g.costs[1:]
			break
		}
	}
	return req
}

// grouper collects descriptors into script calls by a key: one call per
// key of at most maxClassesPerCall classes (core's bound), more calls
// beyond; a class already in a call of its key joins that call, so a
// bucket is never split over two calls.
//
// A class named again at a cost it already has is the same claim, charged
// once (one descriptor named twice); at another cost, that cost adds to the
// class's (at most quota.MaxCost in all, which no bucket can take more
// than): descriptors of one shared limit (share_threshold) with different
// hits_addend drain it by their total, as they drain the reference's
// counter, in one all-or-nothing call.
type grouper[K comparable] struct {
	last   map[K]*group
	of     map[classOf[K]]*group
	costs  map[classCost[K]]bool // the costs each class of a key was named at
	groups []*group
}

type classCost[K comparable] struct {
	classOf[K]
	cost int64
}

type classOf[K comparable] struct {
	k     K
	class string
}

func (gr *grouper[K]) add(k K, t quota.Tenant, cost int64, class string, i int) {
	if gr.last == nil {
		gr.last, gr.of, gr.costs = map[K]*group{}, map[classOf[K]]*group{}, map[classCost[K]]bool{}
	}
	co := classOf[K]{k, class}
	g := gr.of[co]
	first := !gr.costs[classCost[K]{co, cost}]
	gr.costs[classCost[K]{co, cost}] = true
	if g == nil {
		g = gr.last[k]
		if g == nil || len(g.classes) == maxClassesPerCall {
			g = &group{tenant: t}
			gr.last[k] = g
			gr.groups = append(gr.groups, g)
		}
		g.classes = append(g.classes, class)
		g.costs = append(g.costs, cost)
		gr.of[co] = g
	} else if first {
		j := slices.Index(g.classes, class)
		g.costs[j] = min(g.costs[j]+cost, quota.MaxCost)
	}
	g.members = append(g.members, i)
}

// outranks reports whether a should speak for the response (its headers)
// rather than b: a denial over an admission, the longer wait among
// denials, the fewer tokens left among admissions.
func outranks(a, b core.Decision) bool {
	if a.Denied() != b.Denied() {
		return a.Denied()
	}
	if a.Denied() {
		return a.RetryAfter > b.RetryAfter
	}
	if len(a.Buckets) == 0 || len(b.Buckets) == 0 {
		return len(b.Buckets) == 0 && len(a.Buckets) > 0
	}
	return a.Tokens < b.Tokens
}

// descriptorStatus is the answer for one descriptor of class in g.
func descriptorStatus(g *group, class string) *rlsv3.RateLimitResponse_DescriptorStatus {
	d := g.d
	switch {
	case d.Reason == core.ReasonInvalid:
		return invalidStatus("invalid descriptor: " + errText(g.err))
	case d.Reason == core.ReasonUnresolved:
		return invalidStatus("no quota configured: " + errText(g.err))
	case d.Reason == core.ReasonOverloaded:
		// shed: never let through unchecked; Envoy answers 429 and the
		// client retries after the hint
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
			DurationUntilReset: durationpb.New(time.Duration(render.PushbackMillis(d)) * time.Millisecond)}
	case len(d.Buckets) == 0: // failed open: let through unchecked
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	// the descriptor's buckets: its class and those no class of the group
	// names (a tenant-wide ceiling)
	var mine []core.BucketState
	for _, b := range d.Buckets {
		if b.Name == class || !slices.Contains(g.classes, b.Name) {
			mine = append(mine, b)
		}
	}
	binding := -1
	for i, b := range mine {
		if b.Name == d.Bucket {
			binding = i
			break
		}
	}
	code := rlsv3.RateLimitResponse_OK
	if binding >= 0 && !d.Allowed {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if binding < 0 {
		for i, b := range mine {
			if binding < 0 || b.Tokens < mine[binding].Tokens {
				binding = i
			}
		}
	}
	b := mine[binding]
	remaining := uint32(min(b.Remaining(), math.MaxUint32))
	if code == rlsv3.RateLimitResponse_OVER_LIMIT {
		remaining = 0 // as the reference: a denial leaves nothing for this request
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       currentLimit(b.Name, b.Quota),
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(b.ResetAfter()),
	}
}

func errText(err error) string {
	if err == nil {
		return "rejected"
	}
	return err.Error()
}

// invalidStatus answers a descriptor that cannot be checked: over limit
// (never an unlimited pass), with why in the limit's name.
// invalidAnswer is the answer to a request of n descriptors of which some
// are invalid (why(i) says why, "" for a valid one): OVER_LIMIT, each
// invalid descriptor saying why and the others UNKNOWN. Nothing is
// charged for a request that is denied anyway.
func invalidAnswer(n int, why func(i int) string) *rlsv3.RateLimitResponse {
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	for i := range n {
		if w := why(i); w != "" {
			res.Statuses[i] = invalidStatus("invalid descriptor: " + w)
		} else {
			res.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_UNKNOWN}
		}
	}
	return res
}

func invalidStatus(why string) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:         rlsv3.RateLimitResponse_OVER_LIMIT,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "tollgate: " + why},
	}
}

// units are Envoy's rate limit units, shortest first.
var units = []struct {
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
	seconds float64
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 86400},
}

// currentLimit expresses a bucket's sustained rate in requests per unit: the
// shortest unit in which the rate is a whole number, else per day, rounded.
// The burst (capacity) has no field of its own in Envoy's message.
func currentLimit(name string, q quota.Quota) *rlsv3.RateLimitResponse_RateLimit {
	for _, u := range units {
		n := q.RefillPerSecond * u.seconds
		if n >= 1 && math.Abs(n-math.Round(n)) < 1e-9*n {
			return &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: u.unit, RequestsPerUnit: uint32(min(math.Round(n), math.MaxUint32))}
		}
	}
	n := max(math.Round(q.RefillPerSecond*86400), 1)
	return &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: rlsv3.RateLimitResponse_RateLimit_DAY, RequestsPerUnit: uint32(min(n, math.MaxUint32))}
}

// add puts the reference's three headers in res, read from the status it
// would choose: the one with a limit and the least remaining, or the last
// one over its limit; none when no status has a limit. The reset is the
// status's duration_until_reset in whole seconds, rounded up.
func (h *limitHeaders) add(res *rlsv3.RateLimitResponse) { h.addFor(res, nil) }

// addFor is add where soft[i] marks a quota (quota_mode): as the
// reference, a quota over its limit is chosen only by its remaining count.
func (h *limitHeaders) addFor(res *rlsv3.RateLimitResponse, soft []bool) {
	var chosen *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range res.GetStatuses() {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			chosen, least = st, st.GetLimitRemaining()
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && st.GetCurrentLimit() != nil && (i >= len(soft) || !soft[i]) {
			chosen, least = st, 0
		}
	}
	if chosen == nil {
		return
	}
	reset := int64(math.Ceil(chosen.GetDurationUntilReset().AsDuration().Seconds()))
	res.ResponseHeadersToAdd = append(res.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: h.limit, Value: strconv.FormatUint(uint64(chosen.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		&corev3.HeaderValue{Key: h.remaining, Value: strconv.FormatUint(uint64(chosen.GetLimitRemaining()), 10)},
		&corev3.HeaderValue{Key: h.reset, Value: strconv.FormatInt(reset, 10)})
}
