package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// ruleDescriptor is one request descriptor matched against the rules.
type ruleDescriptor struct {
	r       *rule // nil: no rule (unmatched, replaced)
	tenant  quota.Tenant
	class   string
	cost    int64
	invalid string
	// negative: is_negative_hits, a refund or a slot's end
	negative bool
}

// quota reports whether a descriptor matched to r (nil for none) is a
// quota (quota_mode, or every descriptor with WithGlobalQuota): its denial
// fails the request only when every quota of the request is denied.
func (s *Server) quota(r *rule) bool {
	return s.cfg.quota || r != nil && r.quotaMode
}

// shouldRateLimitRules answers req by the configured rules (WithRules).
func (s *Server) shouldRateLimitRules(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "tollgate: rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "tollgate: rate limit descriptor list must not be empty")
	}
	cfg := s.cfg.rules.current() // the one snapshot this request is answered by
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}

	descs := make([]ruleDescriptor, len(ds))
	invalid, replacing := false, false
	for i, d := range ds {
		descs[i] = s.readRule(cfg, req, d)
		invalid = invalid || descs[i].invalid != ""
		replacing = replacing || descs[i].r != nil && len(descs[i].r.replaces) > 0
	}
	if invalid {
		res := invalidAnswer(len(descs), func(i int) string { return descs[i].invalid })
		if s.cfg.metadata {
			res.DynamicMetadata = dynamicMetadata(req, nil)
		}
		return res, nil
	}

	// answered without the store: no rule, replaced, unlimited, zero
	var gr grouper[groupKey]
	live := make([]bool, len(descs)) // a rule applies: neither replaced nor unlimited
	for i := range descs {
		d := &descs[i]
		r := d.r
		switch {
		case r == nil || replacing && replaced(r, descs):
			res.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		case d.negative && (r.unlimited || r.zero):
			res.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		case d.negative:
			res.Statuses[i] = s.negative(ctx, d.tenant, d.class, d.cost, cfg.buckets(d.class))
			continue
		case r.unlimited:
			res.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		live[i] = true
		if r.zero {
			st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: r.limit}
			if r.shadow {
				st.Code = rlsv3.RateLimitResponse_OK
			}
			res.Statuses[i] = st
			continue
		}
		// a quota is charged on its own: the request may pass on it while
		// another quota of it is denied
		k := groupKey{t: d.tenant, shadow: r.shadow}
		if s.quota(r) {
			k.quota = i + 1
		}
		gr.add(k, d.tenant, d.cost, d.class, i)
	}

	for _, g := range gr.groups {
		g.resolved = cfg.resolved(g.classes) // the limits matched, passed as data
		if err := s.decide(ctx, g); err != nil {
			return nil, err
		}
		for _, i := range g.members {
			res.Statuses[i] = ruleStatus(g, descs[i])
		}
	}
	// as the reference: OVER_LIMIT when a descriptor that is not a quota
	// is over its limit, or when every quota is (an unlimited descriptor
	// is neither)
	soft := make([]bool, len(descs))
	quotas, quotasOver := 0, 0
	for i, st := range res.Statuses {
		over := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		r := descs[i].r
		unlimited := r != nil && r.unlimited
		if !live[i] {
			r = nil // replaced: no rule, as the reference
		}
		if !unlimited && s.quota(r) {
			soft[i] = true
			quotas++
			if over {
				quotasOver++
			}
		} else if over {
			res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if quotas > 0 && quotas == quotasOver {
		res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	// the headers speak for the answer: a quota's denial not when the
	// request passes on another
	var headline *group
	for _, g := range gr.groups {
		if g.d.Denied() && soft[g.members[0]] && res.OverallCode == rlsv3.RateLimitResponse_OK {
			continue
		}
		if headline == nil || outranks(g.d, headline.d) {
			headline = g
		}
	}
	if s.cfg.shadow {
		res.OverallCode = rlsv3.RateLimitResponse_OK
	}
	switch {
	case s.cfg.limitHdrs != nil:
		s.cfg.limitHdrs.addFor(res, soft) // a limit of 0 has a status to read
	case headline != nil:
		s.addHeaders(res, headline.d) // a body only when the answer denies
	}
	if s.cfg.metadata {
		// the rules of the descriptors that passed, in order
		var passed []*structpb.Struct
		for i, st := range res.Statuses {
			if live[i] && st.Code != rlsv3.RateLimitResponse_OVER_LIMIT && descs[i].r.metadata != nil {
				passed = append(passed, descs[i].r.metadata)
			}
		}
		res.DynamicMetadata = dynamicMetadata(req, passed)
	}
	return res, nil
}

// dynamicMetadata is the answer's dynamic metadata, as the reference's
// ratelimitToMetadata builds it: the domain, each descriptor (its entries
// as "key=value", its limit override, its hits_addend), the request's
// hits_addend unless 0, and under "metadata" the passed rules' metadata
// merged (see mergeMetadata), when there is any.
func dynamicMetadata(req *rlsv3.RateLimitRequest, passed []*structpb.Struct) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		es := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: es})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, m := range passed {
		mergeMetadata(merged, m)
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata merges src into dst as the reference's mergeMetadata: a
// key dst lacks is added, a key both hold as structs is merged, and any
// other key keeps dst's value (the first descriptor's). src, a rule's
// own, is never changed: what dst takes from it is a copy.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case cur.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(cur.GetStructValue(), v.GetStructValue())
		}
	}
}

// replaced reports whether a rule matched by one of descs replaces r (by
// name), as the reference drops it: at most MaxDescriptors lookups in
// the sets read at load, whatever the length of the replaces lists.
func replaced(r *rule, descs []ruleDescriptor) bool {
	if r.unlimited || r.name == "" {
		return false
	}
	for i := range descs {
		if o := descs[i].r; o != nil {
			if _, ok := o.replaces[r.name]; ok {
				return true
			}
		}
	}
	return false
}

// maxClassesPerCall is core's bound on the classes of one Request.
const maxClassesPerCall = 16

// groupKey is what the descriptors of one script call share: the tenant
// (one hash tag) and whether a denial answers OK, whatever their
// hits_addend; each class is charged its own cost (see groupDescriptors).
type groupKey struct {
	t      quota.Tenant
	shadow bool
	quota  int // a quota's descriptor index + 1: charged on its own; 0 for the others
}

// ruleStatus is the answer for descriptor d of g.
func ruleStatus(g *group, d ruleDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := descriptorStatus(g, d.class)
	switch g.d.Reason {
	case core.ReasonInvalid, core.ReasonUnresolved, core.ReasonOverloaded:
		return st
	}
	if len(g.d.Buckets) == 0 {
		return st // failed open
	}
	if d.r.tenantKey == "" {
		st.CurrentLimit = d.r.limit
	}
	if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
		st.LimitRemaining = 0
		if d.r.shadow {
			st.Code = rlsv3.RateLimitResponse_OK
		}
	}
	return st
}

// readRule matches descriptor d of req against cfg.
func (s *Server) readRule(cfg *Config, req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) ruleDescriptor {
	var out ruleDescriptor
	if n := len(req.GetDescriptors()); n > MaxDescriptors {
		out.invalid = fmt.Sprintf("%d descriptors in one request, more than %d", n, MaxDescriptors)
		return out
	}
	// as the reference: a descriptor's hits_addend, 0 included (a check
	// that charges nothing), else the request's, at least 1
	cost := uint64(max(1, req.GetHitsAddend()))
	if h := d.GetHitsAddend(); h != nil {
		cost = h.GetValue()
	}
	if cost > uint64(s.cfg.maxCost) {
		out.invalid = fmt.Sprintf("hits_addend must be 0 to %d, got %d", s.cfg.maxCost, cost)
		return out
	}
	out.cost, out.negative = int64(cost), d.GetIsNegativeHits()

	var r *rule
	var shared []string
	if l := d.GetLimit(); s.cfg.limits && l != nil && cfg.domains[req.GetDomain()] != nil {
		u := rlsv3.RateLimitResponse_RateLimit_Unit(l.GetUnit())
		r = &rule{class: overrideClass(l.GetRequestsPerUnit(), u),
			limit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: u}}
		if l.GetRequestsPerUnit() == 0 {
			r.zero = true
		} else if _, ok := overrideQuota(r.class); !ok {
			out.invalid = fmt.Sprintf("limit override of %d per %v cannot be a bucket", l.GetRequestsPerUnit(), u)
			return out
		}
	} else {
		r, shared = cfg.match(req.GetDomain(), d)
	}
	if r == nil {
		return out
	}
	out.r = r
	if r.unlimited || r.zero {
		return out
	}
	if r.tenantKey == "" {
		out.tenant = quota.Tenant{ID: bucketID(req.GetDomain(), d, shared)}
		out.class = r.class
		return out
	}
	// the tenant model: the services' bucket of this tenant and class
	var seenTenant, seenTier bool
	for _, e := range d.GetEntries() {
		switch k := e.GetKey(); {
		case k == r.tenantKey:
			if seenTenant {
				out.invalid = fmt.Sprintf("entry %q given twice", e.GetKey())
				return out
			}
			seenTenant, out.tenant.ID = true, e.GetValue()
		case r.tierKey != "" && k == r.tierKey:
			if seenTier {
				out.invalid = fmt.Sprintf("entry %q given twice", e.GetKey())
				return out
			}
			seenTier, out.tenant.Tier = true, e.GetValue()
		}
	}
	out.class = r.tenantClass
	switch {
	case !seenTenant:
		out.invalid = "no " + r.tenantKey + " entry"
	case seenTier && !s.cfg.rules.knownTier(out.tenant.Tier):
		// never a metric label or a quota lookup for a tier nobody configured
		out.invalid = "unknown tier"
	default:
		if _, err := s.lim.Keys().Bucket(out.tenant.ID, out.class); err != nil {
			out.invalid = err.Error()
		}
	}
	return out
}

// bucketID is the hash tag of a rule's bucket: the domain and the
// descriptor's entries (a share_threshold entry by its wildcard), as the
// reference's cache key, escaped so that different descriptors never
// share one; a long one is hashed to fit quota.MaxTenantIDLen.
func bucketID(domain string, d *ratelimitv3.RateLimitDescriptor, shared []string) string {
	var b strings.Builder
	b.WriteString(escapeEntry(domain))
	for i, e := range d.GetEntries() {
		v := e.GetValue()
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		b.WriteByte('|')
		b.WriteString(escapeEntry(e.GetKey()))
		b.WriteByte('=')
		b.WriteString(escapeEntry(v))
	}
	if b.Len() <= quota.MaxTenantIDLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "sha256=" + hex.EncodeToString(sum[:])
}

var entryEscaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

func escapeEntry(s string) string { return entryEscaper.Replace(s) }
