package config

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"go.yaml.in/yaml/v3"
)

// Parse parses and validates a configuration file's contents; name is the
// file name used in error messages. Unknown fields, duplicate keys, wrong
// types and out-of-range values are errors; the returned error is an
// [*Error] listing every problem with its line and field.
func Parse(name string, data []byte) (*Config, error) {
	p := &schema{parser: &parser{file: name}, routeLines: map[string]int{}}
	if len(data) > MaxFileSize {
		p.fail(0, "", "file is %d bytes, larger than %d", len(data), MaxFileSize)
		return nil, p.err()
	}
	root, ok := p.document(data)
	if !ok {
		return nil, p.err()
	}
	cfg := p.config(root)
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	return cfg, nil
}

// schema reads the file's fields into a Config.
type schema struct {
	*parser
	cfg *Config
	// tierNames is every tier the file declares, nil when the tiers could
	// not all be read (default_tier is then not checked against them).
	tierNames map[string]bool
	// tierClasses is, per declared tier, every class it declares, whether
	// or not its quota is valid; nil for a tier whose classes could not all
	// be read. Routes are checked against these, so that a route naming an
	// unknown class is reported with the tiers' own problems, while one bad
	// quota is not reported again by every route naming its class.
	tierClasses map[string]map[string]bool
	// routeLines is the line of each route key read so far, in both lists.
	routeLines map[string]int
	// index is the tiers' index for the route checks (see tiers), built
	// once the tiers are read
	index *tierIndex
}

// tiers returns the index of the file's tiers, for the checks of routes
// and class settings against every tier.
func (p *schema) tierIndex() *tierIndex {
	if p.index == nil {
		p.index = newTierIndex(p.cfg.Tiers.Tiers, func(tn string) (map[string]bool, bool) {
			d := p.tierClasses[tn]
			return d, d != nil
		})
	}
	return p.index
}

// name checks a tier or class name.
func (p *schema) name(n *yaml.Node, field, s string) bool {
	if err := quota.ValidateName(s); err != nil {
		p.failAt(n, field, "bad name: %s", strings.TrimPrefix(err.Error(), core.ErrInvalidRequest.Error()+": "))
		return false
	}
	return true
}

var topFields = []string{"version", "default_tier", "anonymous_tier", "tiers", "routes", "grpc_methods", "header_style", "failure_policy", "timeout", "cache_ttl", "key_prefix",
	"breaker", "local_fallback", "deny_cache", "shadow", "shadow_classes", "leases", "batching"}

func (p *schema) config(root *yaml.Node) *Config {
	cfg := &Config{
		Source:        p.file,
		Version:       1,
		HeaderStyle:   render.DefaultHeaderStyle,
		FailurePolicy: core.FailOpen,
		Timeout:       core.DefaultTimeout,
		CacheTTL:      quota.DefaultCacheTTL,
		KeyPrefix:     core.DefaultPrefix,
		Routes:        gate.Routes{},
		GRPCMethods:   gate.Routes{},
		Batching:      true,
	}
	p.cfg = cfg
	entries, ok := p.mapping(root, "", topFields...)
	if !ok {
		return nil
	}
	byName := map[string]entry{}
	for _, e := range entries {
		byName[e.name] = e
	}
	if e, ok := byName["version"]; ok {
		if v, ok := p.int64(e.val, "version"); ok && v != 1 {
			p.failAt(deref(e.val), "version", "unsupported schema version %d; this build reads version 1", v)
		}
	}
	if tiers, ok := byName["tiers"]; !ok {
		p.failAt(root, "tiers", "is required: define at least one tier")
	} else {
		cfg.Tiers.Tiers = p.tiers(tiers.val)
	}
	if e, ok := byName["default_tier"]; !ok {
		p.failAt(root, "default_tier", "is required: the tier of a tenant that names none")
	} else if s, ok := p.str(e.val, "default_tier"); ok {
		cfg.Tiers.Default = s
		if p.tierNames != nil && !p.tierNames[s] {
			p.failAt(deref(e.val), "default_tier", "tier %q is not defined under tiers", s)
		}
	}
	if e, ok := byName["anonymous_tier"]; ok {
		if s, ok := p.str(e.val, "anonymous_tier"); ok {
			cfg.AnonymousTier = s
			if p.tierNames != nil && !p.tierNames[s] {
				p.failAt(deref(e.val), "anonymous_tier", "tier %q is not defined under tiers", s)
			}
		}
	}
	if e, ok := byName["header_style"]; ok {
		cfg.HeaderStyle = p.headerStyle(e.val)
	}
	if e, ok := byName["failure_policy"]; ok {
		if s, ok := p.str(e.val, "failure_policy"); ok {
			switch s {
			case "open":
				cfg.FailurePolicy = core.FailOpen
			case "closed":
				cfg.FailurePolicy = core.FailClosed
			default:
				p.failAt(deref(e.val), "failure_policy", "must be open or closed, got %q", s)
			}
		}
	}
	if e, ok := byName["timeout"]; ok {
		if d, ok := p.duration(e.val, "timeout", MaxTimeout); ok {
			cfg.Timeout = d
		}
	}
	if e, ok := byName["cache_ttl"]; ok {
		if d, ok := p.duration(e.val, "cache_ttl", MaxCacheTTL); ok {
			cfg.CacheTTL = d
		}
	}
	if e, ok := byName["key_prefix"]; ok {
		if s, ok := p.str(e.val, "key_prefix"); ok {
			if _, err := keys.New(s); err != nil {
				p.failAt(deref(e.val), "key_prefix", "%s", strings.TrimPrefix(err.Error(), core.ErrInvalidConfig.Error()+": "))
			} else {
				cfg.KeyPrefix = s
			}
		}
	}
	if e, ok := byName["routes"]; ok {
		cfg.Routes = p.routes(httpRoutes, e.val)
	}
	if e, ok := byName["grpc_methods"]; ok {
		cfg.GRPCMethods = p.routes(grpcMethods, e.val)
	}
	p.deployment(byName)
	if len(p.errs) == 0 {
		// The file's checks mirror core's; this catches any rule core has
		// and the parser does not.
		if err := cfg.Tiers.Validate(); err != nil {
			p.failAt(root, "tiers", "%v", err)
		}
	}
	return cfg
}

func (p *schema) headerStyle(n *yaml.Node) render.HeaderStyle {
	n = deref(n)
	var names []string
	if n != nil && n.Kind == yaml.SequenceNode {
		for i, c := range n.Content {
			if s, ok := p.str(c, fmt.Sprintf("header_style[%d]", i)); ok {
				names = append(names, s)
			}
		}
	} else if s, ok := p.str(n, "header_style"); ok {
		names = append(names, s)
	} else {
		return render.DefaultHeaderStyle
	}
	st, err := parseHeaderStyle(strings.Join(names, ","))
	if err != nil {
		p.failAt(n, "header_style", "%v", err)
		return render.DefaultHeaderStyle
	}
	return st
}

// parseHeaderStyle parses a comma-separated list of header style names:
// ietf, x-ratelimit, x-ratelimit-epoch, draft-06, none, and default (ietf
// and x-ratelimit).
func parseHeaderStyle(s string) (render.HeaderStyle, error) {
	var st render.HeaderStyle
	for _, f := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "ietf", "ietf-11", "draft-11":
			st |= render.HeaderIETF
		case "x-ratelimit", "xratelimit":
			st |= render.HeaderXRateLimit
		case "x-ratelimit-epoch", "epoch":
			st |= render.HeaderXRateLimitEpoch
		case "draft-06", "draft06":
			st |= render.HeaderDraft06
		case "default":
			st |= render.DefaultHeaderStyle
		case "none", "":
		default:
			return 0, fmt.Errorf("unknown header style %q (want ietf, x-ratelimit, x-ratelimit-epoch, draft-06, none or default)", f)
		}
	}
	return st, nil
}

func (p *schema) tiers(n *yaml.Node) map[string]quota.Tier {
	entries, ok := p.mapping(n, "tiers")
	if !ok {
		return nil
	}
	complete := len(entries) > 0
	if !complete {
		p.failAt(deref(n), "tiers", "must define at least one tier")
	}
	names := make(map[string]bool, len(entries))
	p.tierClasses = make(map[string]map[string]bool, len(entries))
	out := make(map[string]quota.Tier, len(entries))
	for _, e := range entries {
		field := "tiers." + e.name
		if !p.name(e.key, field, e.name) {
			complete = false
			continue
		}
		names[e.name] = true
		out[e.name] = p.tier(e.val, e.name, field)
	}
	if complete && len(names) == len(deref(n).Content)/2 {
		p.tierNames = names
	}
	return out
}

func (p *schema) tier(n *yaml.Node, name, field string) quota.Tier {
	var t quota.Tier
	entries, ok := p.mapping(n, field, "classes", "ceiling")
	if !ok {
		return t
	}
	hasClasses := false
	for _, e := range entries {
		switch e.name {
		case "classes":
			hasClasses = true
			t.Classes, p.tierClasses[name] = p.classes(e.val, field+".classes")
		case "ceiling":
			if q, ok := p.quota(e.val, field+".ceiling"); ok {
				t.Ceiling = &q
			}
		}
	}
	if !hasClasses {
		p.failAt(deref(n), field+".classes", "is required: a tier needs at least one class")
	}
	if t.Ceiling != nil && t.Ceiling.Concurrency > 0 {
		for _, class := range slices.Sorted(maps.Keys(t.Classes)) {
			if t.Classes[class].Concurrency > 0 {
				p.failAt(deref(n), field+".classes."+class+".concurrency", "the ceiling has a concurrency limit too; a request may have one (the class's or the ceiling's)")
				break
			}
		}
	}
	return t
}

// classes reads a tier's classes, and returns with them every class name
// it declares (valid quota or not), or nil declared when some entry could
// not be read as a class name.
func (p *schema) classes(n *yaml.Node, field string) (classes map[string]quota.Quota, declared map[string]bool) {
	entries, ok := p.mapping(n, field)
	if !ok {
		return nil, nil
	}
	complete := len(entries) > 0 && len(entries) == len(deref(n).Content)/2
	if len(entries) == 0 {
		p.failAt(deref(n), field, "must define at least one class")
	}
	out := make(map[string]quota.Quota, len(entries))
	declared = make(map[string]bool, len(entries))
	for _, e := range entries {
		sub := field + "." + e.name
		if !p.name(e.key, sub, e.name) {
			complete = false
			continue
		}
		if e.name == quota.CeilingBucket {
			p.failAt(e.key, sub, "class name %q is reserved for the tenant-wide ceiling; use the tier's ceiling field", e.name)
			complete = false
			continue
		}
		declared[e.name] = true
		if q, ok := p.quota(e.val, sub); ok {
			out[e.name] = q
		}
	}
	if !complete {
		declared = nil
	}
	return out, declared
}

// inRange reads field with read (p.int64 or p.float): a finite number,
// not tooLow (else it fails with "must be <low>") and at most hi. It
// returns 0 and false for a value it refused.
func inRange[T int64 | float64](p *schema, n *yaml.Node, field string, read func(*yaml.Node, string) (T, bool), tooLow func(T) bool, hi T, low string) (T, bool) {
	v, ok := read(n, field)
	switch f := float64(v); {
	case !ok:
	case math.IsNaN(f) || math.IsInf(f, 0):
		p.failAt(deref(n), field, "must be finite, got %v", v)
	case tooLow(v):
		p.failAt(deref(n), field, "must be %s, got %v", low, v)
	case v > hi:
		p.failAt(deref(n), field, "must be <= %v, got %v", hi, v)
	default:
		return v, true
	}
	return 0, false
}

func belowOne[T int64 | float64](v T) bool { return v < 1 }

func (p *schema) quota(n *yaml.Node, field string) (quota.Quota, bool) {
	var q quota.Quota
	entries, ok := p.mapping(n, field, "capacity", "refill_per_second", "concurrency", "max_debt", "max_settle_ratio")
	if !ok {
		return q, false
	}
	var capOK, rateOK, capSeen, rateSeen bool
	for _, e := range entries {
		switch e.name {
		case "capacity":
			capSeen = true
			q.Capacity, capOK = inRange(p, e.val, field+".capacity", p.int64, belowOne, quota.MaxCapacity, "> 0")
		case "concurrency":
			q.Concurrency, _ = inRange(p, e.val, field+".concurrency", p.int64, belowOne, quota.MaxConcurrency, ">= 1 (omit it for no concurrency limit)")
		case "max_debt":
			q.MaxDebt, _ = inRange(p, e.val, field+".max_debt", p.int64, belowOne, quota.MaxCost, ">= 1 (omit it to carry a debt in full)")
		case "max_settle_ratio":
			q.MaxSettleRatio, _ = inRange(p, e.val, field+".max_settle_ratio", p.float, belowOne, quota.MaxSettleRatioLimit, ">= 1 (omit it to settle any actual cost)")
		case "refill_per_second":
			rateSeen = true
			q.RefillPerSecond, rateOK = inRange(p, e.val, field+".refill_per_second", p.float, func(v float64) bool { return v <= 0 }, quota.MaxRefillPerSecond, "> 0")
		}
	}
	if !capSeen {
		p.failAt(deref(n), field+".capacity", "is required (the largest burst, in tokens)")
	}
	if !rateSeen {
		p.failAt(deref(n), field+".refill_per_second", "is required (the sustained rate, tokens per second)")
	}
	if !capOK || !rateOK {
		return q, false
	}
	if err := q.Validate(); err != nil {
		p.failAt(deref(n), field, "%s", strings.TrimPrefix(err.Error(), quota.ErrInvalid.Error()+": "))
		return q, false
	}
	return q, true
}

// routeList is what differs between the file's two route lists: the
// fields naming the route, and how they make a gate.Routes key.
type routeList struct {
	name   string
	fields []string
	// key reads the naming fields of one entry; display is how errors
	// name the route.
	key func(p *schema, byName map[string]entry, item *yaml.Node, field string) (key, display string, ok bool)
}

var (
	httpRoutes  = routeList{name: "routes", fields: []string{"method", "path", "class", "cost", "exempt"}, key: (*schema).httpKey}
	grpcMethods = routeList{name: "grpc_methods", fields: []string{"method", "class", "cost", "exempt"}, key: (*schema).grpcKey}
)

// routes reads a route list into a gate.Routes table. A key may appear once
// across both lists, since adapters are given their union.
func (p *schema) routes(l routeList, n *yaml.Node) gate.Routes {
	table := gate.Routes{}
	for i, item := range p.sequence(n, l.name) {
		field := fmt.Sprintf("%s[%d]", l.name, i)
		entries, ok := p.mapping(item, field, l.fields...)
		if !ok {
			continue
		}
		item = deref(item)
		byName := map[string]entry{}
		for _, e := range entries {
			byName[e.name] = e
		}
		key, display, kok := l.key(p, byName, item, field)
		r, rok := p.target(byName, item, field)
		if !kok || !rok {
			continue
		}
		if line, dup := p.routeLines[key]; dup {
			p.failAt(item, field, "%s is already mapped at line %d", display, line)
			continue
		}
		p.routeLines[key] = item.Line
		table[key] = r
	}
	return table
}

var httpMethod = regexp.MustCompile(`^[A-Z][A-Z0-9_-]{0,31}$`)

func (p *schema) httpKey(byName map[string]entry, item *yaml.Node, field string) (key, display string, ok bool) {
	method, mval, mok := p.requiredStr(byName, item, field+".method", "is required (an HTTP method such as GET, or *)")
	if mok && method != "*" && !httpMethod.MatchString(method) {
		hint := ""
		if up := strings.ToUpper(method); httpMethod.MatchString(up) {
			hint = fmt.Sprintf(" (methods are case-sensitive: did you mean %s?)", up)
		}
		p.failAt(mval, field+".method", "must be an upper-case HTTP method or *, got %q%s", method, hint)
		mok = false
	}
	path, pval, pok := p.requiredStr(byName, item, field+".path", "is required (the route pattern, e.g. /v1/users/:id)")
	if pok && (!strings.HasPrefix(path, "/") || len(path) > MaxPathLen || strings.ContainsFunc(path, isSpaceOrControl)) {
		p.failAt(pval, field+".path", "must start with / and hold no spaces or control characters (at most %d bytes), got %q", MaxPathLen, path)
		pok = false
	}
	if !mok || !pok {
		return "", "", false
	}
	if method == "*" {
		return path, "* " + path, true
	}
	return method + " " + path, method + " " + path, true
}

// requiredStr reads the string at field (its last element is the key in
// byName): a missing one is reported at item with why, one that is not a
// string as p.str does. val is the value's node, for a later complaint.
func (p *schema) requiredStr(byName map[string]entry, item *yaml.Node, field, why string) (s string, val *yaml.Node, ok bool) {
	e, found := byName[field[strings.LastIndexByte(field, '.')+1:]]
	if !found {
		p.failAt(item, field, "%s", why)
		return "", nil, false
	}
	s, ok = p.str(e.val, field)
	return s, deref(e.val), ok
}

// fullMethod is a gRPC full method, or a service wildcard.
var fullMethod = regexp.MustCompile(`^/[^/]+/[^/]+$`)

func (p *schema) grpcKey(byName map[string]entry, item *yaml.Node, field string) (key, display string, ok bool) {
	s, val, ok := p.requiredStr(byName, item, field+".method", "is required (a full method name, /package.Service/Method)")
	if !ok {
		return "", "", false
	}
	if !fullMethod.MatchString(s) || len(s) > MaxPathLen || strings.ContainsFunc(s, isSpaceOrControl) {
		p.failAt(val, field+".method", "must be /package.Service/Method or /package.Service/*, got %q", s)
		return "", "", false
	}
	return s, s, true
}

// target reads what a route costs: exempt, or a class and a cost (default
// 1) that every tier can admit.
func (p *schema) target(byName map[string]entry, item *yaml.Node, field string) (r gate.Route, ok bool) {
	if e, found := byName["exempt"]; found {
		exempt, bok := p.bool(e.val, field+".exempt")
		if !bok {
			return r, false
		}
		if exempt {
			ok = true
			for _, f := range []string{"class", "cost"} {
				if e, found := byName[f]; found {
					p.failAt(e.key, field+"."+f, "an exempt route is never charged: remove %s or exempt", f)
					ok = false
				}
			}
			return gate.Route{Exempt: true}, ok
		}
	}
	ok = true
	r.Cost = 1
	tiers := p.cfg.Tiers.Tiers
	if s, val, sok := p.requiredStr(byName, item, field+".class", "is required (or exempt: true)"); !sok {
		ok = false
	} else {
		r.Class = s
		if x := p.tierIndex(); !x.everyKnown(s) {
			ok = false
			for _, tn := range x.names {
				if !p.reporting() {
					break
				}
				if declared := p.tierClasses[tn]; declared != nil && !declared[s] {
					p.failAt(val, field+".class", "class %q is not defined in tier %q: its tenants' requests could not be resolved", s, tn)
					break
				}
			}
		}
	}
	if e, found := byName["cost"]; found {
		v, vok := p.int64(e.val, field+".cost")
		switch {
		case !vok:
			ok = false
		case v < 1 || v > quota.MaxCost:
			p.failAt(deref(e.val), field+".cost", "must be 1 to %d, got %d", int64(quota.MaxCost), v)
			ok = false
		default:
			r.Cost = v
			x := p.tierIndex()
			if r.Class == "" || x.admits(r.Class, v) {
				break
			}
			ok = false
			for _, tn := range x.names {
				if !p.reporting() {
					break
				}
				t := tiers[tn]
				if q, defined := t.Classes[r.Class]; defined && v > q.Capacity {
					p.failAt(deref(e.val), field+".cost", "cost %d exceeds capacity %d of class %q in tier %q: such a request could never be admitted", v, q.Capacity, r.Class, tn)
					break
				}
				if t.Ceiling != nil && v > t.Ceiling.Capacity {
					p.failAt(deref(e.val), field+".cost", "cost %d exceeds the ceiling capacity %d of tier %q: such a request could never be admitted", v, t.Ceiling.Capacity, tn)
					break
				}
			}
		}
	}
	return r, ok
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }
