package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"go.yaml.in/yaml/v3"
)

// FieldError is one thing wrong with a configuration file. Its message reads
// "file:line: field: problem", for example
//
//	tiers.yaml:7: tiers.free.classes.export.capacity: must be > 0, got -1
//
// It wraps [core.ErrInvalidConfig].
type FieldError struct {
	// File is the file name given to Parse or Load.
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Field is the dotted path of the field, e.g.
	// "tiers.free.classes.export.capacity", or "routes[2].class"; empty
	// for a problem with the file as a whole.
	Field string
	// Msg says what is wrong.
	Msg string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns core.ErrInvalidConfig.
func (e *FieldError) Unwrap() error { return core.ErrInvalidConfig }

// Error is every problem found in a configuration file, in file order (at
// most maxErrors of them). Its message is one FieldError per line.
type Error struct {
	Errs []*FieldError
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		parts[i] = fe.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the field errors, so errors.Is(err, core.ErrInvalidConfig)
// and errors.As(err, **FieldError) work.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		errs[i] = fe
	}
	return errs
}

const maxErrors = 50

// Parse parses and validates a configuration file's contents; name is the
// file name used in error messages. Unknown fields, duplicate keys, wrong
// types and out-of-range values are errors; the returned error is an
// [*Error] listing every problem with its line and field.
func Parse(name string, data []byte) (*Config, error) {
	p := &parser{file: name}
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

type parser struct {
	file       string
	errs       []*FieldError
	crossCheck bool
}

func (p *parser) fail(line int, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) failAt(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.fail(line, field, format, args...)
}

func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *FieldError) int { return a.Line - b.Line })
	return &Error{Errs: p.errs}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// document decodes the single YAML document in data.
func (p *parser) document(data []byte) (root *yaml.Node, ok bool) {
	defer func() {
		// The YAML library is not ours: a panic in it is a parse error,
		// never a crash of the service reloading its file.
		if r := recover(); r != nil {
			p.fail(0, "", "YAML parser failed: %v", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.fail(0, "", "file is empty")
		} else {
			p.yamlError(err)
		}
		return nil, false
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.yamlError(err)
		return nil, false
	default:
		p.fail(next.Line, "", "more than one YAML document; want one")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.fail(doc.Line, "", "file is empty")
		return nil, false
	}
	return doc.Content[0], true
}

func (p *parser) yamlError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	p.fail(line, "", "invalid YAML: %s", msg)
}

// deref follows aliases (*name) to their anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing (null)"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

type entry struct {
	name     string
	key, val *yaml.Node
}

// mapping returns n's entries in order. known, when not nil, lists the
// accepted keys; others are reported. Duplicate keys and merge keys (<<)
// are reported too.
func (p *parser) mapping(n *yaml.Node, field string, known ...string) ([]entry, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		p.failAt(n, field, "must be a mapping, got %s", kindName(n))
		return nil, false
	}
	seen := map[string]int{}
	var out []entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
			p.failAt(n.Content[i], field, "keys must be plain names")
			continue
		}
		sub := join(field, k.Value)
		if k.ShortTag() == "!!merge" {
			p.failAt(k, sub, "merge keys (<<) are not supported; repeat the fields or use an alias for the whole value")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.failAt(k, sub, "defined twice (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		if known != nil && !contains(known, k.Value) {
			p.failAt(k, sub, "unknown field (want one of %s)", strings.Join(known, ", "))
			continue
		}
		out = append(out, entry{name: k.Value, key: k, val: v})
	}
	return out, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func join(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

// scalar returns n's value if n is a non-null scalar.
func (p *parser) scalar(n *yaml.Node, field string) (*yaml.Node, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.failAt(n, field, "must be a value, got %s", kindName(n))
		return nil, false
	}
	return n, true
}

func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	s, ok := p.scalar(n, field)
	if !ok {
		return "", false
	}
	return s.Value, true
}

func (p *parser) int64(n *yaml.Node, field string) (int64, bool) {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	var v int64
	if s.ShortTag() != "!!int" || s.Decode(&v) != nil {
		p.failAt(s, field, "must be an integer, got %q", s.Value)
		return 0, false
	}
	return v, true
}

func (p *parser) float(n *yaml.Node, field string) (float64, bool) {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	var v float64
	if (s.ShortTag() != "!!int" && s.ShortTag() != "!!float") || s.Decode(&v) != nil {
		p.failAt(s, field, "must be a number, got %q", s.Value)
		return 0, false
	}
	return v, true
}

func (p *parser) duration(n *yaml.Node, field string, maxD time.Duration) (time.Duration, bool) {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s.Value)
	if err != nil {
		p.failAt(s, field, "must be a duration such as 100ms, 2s or 1m, got %q", s.Value)
		return 0, false
	}
	if d <= 0 || d > maxD {
		p.failAt(s, field, "must be > 0 and <= %v, got %v", maxD, d)
		return 0, false
	}
	return d, true
}

// name checks a tier or class name.
func (p *parser) name(n *yaml.Node, field, s string) bool {
	if err := core.ValidateName(s); err != nil {
		p.failAt(n, field, "bad name: %s", strings.TrimPrefix(err.Error(), core.ErrInvalidRequest.Error()+": "))
		return false
	}
	return true
}

var topFields = []string{"version", "default_tier", "tiers", "routes", "grpc_methods", "header_style", "failure_policy", "timeout", "cache_ttl", "key_prefix"}

func (p *parser) config(root *yaml.Node) *Config {
	cfg := &Config{
		Source:        p.file,
		Version:       1,
		HeaderStyle:   core.DefaultHeaderStyle,
		FailurePolicy: core.FailOpen,
		Timeout:       core.DefaultTimeout,
		CacheTTL:      core.DefaultOverrideCacheTTL,
		KeyPrefix:     core.DefaultPrefix,
		routes:        map[routeKey]int{},
		grpc:          map[string]int{},
	}
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
	tiers, tierOK := byName["tiers"]
	errsBefore := len(p.errs)
	if !tierOK {
		p.failAt(root, "tiers", "is required: define at least one tier")
	} else {
		cfg.Tiers.Tiers = p.tiers(tiers.val)
	}
	// Routes are checked against the tiers only when the tiers are sound:
	// one bad class must not be reported again by every route naming it.
	p.crossCheck = tierOK && len(p.errs) == errsBefore
	if e, ok := byName["default_tier"]; !ok {
		p.failAt(root, "default_tier", "is required: the tier of a tenant that names none")
	} else if s, ok := p.str(e.val, "default_tier"); ok {
		cfg.Tiers.Default = s
		if _, defined := cfg.Tiers.Tiers[s]; p.crossCheck && !defined {
			p.failAt(deref(e.val), "default_tier", "tier %q is not defined under tiers", s)
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
			if _, err := core.NewKeys(s); err != nil {
				p.failAt(deref(e.val), "key_prefix", "%s", strings.TrimPrefix(err.Error(), core.ErrInvalidConfig.Error()+": "))
			} else {
				cfg.KeyPrefix = s
			}
		}
	}
	if e, ok := byName["routes"]; ok {
		p.routes(cfg, e.val)
	}
	if e, ok := byName["grpc_methods"]; ok {
		p.grpcMethods(cfg, e.val)
	}
	if len(p.errs) == 0 {
		// The file's checks mirror core's; this catches any rule core has
		// and the parser does not.
		if err := cfg.Tiers.Validate(); err != nil {
			p.failAt(root, "tiers", "%v", err)
		}
	}
	return cfg
}

func (p *parser) headerStyle(n *yaml.Node) core.HeaderStyle {
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
		return core.DefaultHeaderStyle
	}
	st, err := core.ParseHeaderStyle(strings.Join(names, ","))
	if err != nil {
		p.failAt(n, "header_style", "%s", strings.TrimPrefix(err.Error(), core.ErrInvalidConfig.Error()+": "))
		return core.DefaultHeaderStyle
	}
	return st
}

func (p *parser) tiers(n *yaml.Node) map[string]core.Tier {
	entries, ok := p.mapping(n, "tiers")
	if !ok {
		return nil
	}
	if len(entries) == 0 {
		p.failAt(deref(n), "tiers", "must define at least one tier")
	}
	out := make(map[string]core.Tier, len(entries))
	for _, e := range entries {
		field := "tiers." + e.name
		if !p.name(e.key, field, e.name) {
			continue
		}
		out[e.name] = p.tier(e.val, field)
	}
	return out
}

func (p *parser) tier(n *yaml.Node, field string) core.Tier {
	var t core.Tier
	entries, ok := p.mapping(n, field, "classes", "ceiling")
	if !ok {
		return t
	}
	hasClasses := false
	for _, e := range entries {
		switch e.name {
		case "classes":
			hasClasses = true
			t.Classes = p.classes(e.val, field+".classes")
		case "ceiling":
			if q, ok := p.quota(e.val, field+".ceiling"); ok {
				t.Ceiling = &q
			}
		}
	}
	if !hasClasses {
		p.failAt(deref(n), field+".classes", "is required: a tier needs at least one class")
	}
	return t
}

func (p *parser) classes(n *yaml.Node, field string) map[string]core.Quota {
	entries, ok := p.mapping(n, field)
	if !ok {
		return nil
	}
	if len(entries) == 0 {
		p.failAt(deref(n), field, "must define at least one class")
	}
	out := make(map[string]core.Quota, len(entries))
	for _, e := range entries {
		sub := field + "." + e.name
		if !p.name(e.key, sub, e.name) {
			continue
		}
		if e.name == core.CeilingBucket {
			p.failAt(e.key, sub, "class name %q is reserved for the tenant-wide ceiling; use the tier's ceiling field", e.name)
			continue
		}
		if q, ok := p.quota(e.val, sub); ok {
			out[e.name] = q
		}
	}
	return out
}

func (p *parser) quota(n *yaml.Node, field string) (core.Quota, bool) {
	var q core.Quota
	entries, ok := p.mapping(n, field, "capacity", "refill_per_second")
	if !ok {
		return q, false
	}
	var capOK, rateOK, capSeen, rateSeen bool
	for _, e := range entries {
		switch e.name {
		case "capacity":
			capSeen = true
			sub := field + ".capacity"
			v, ok := p.int64(e.val, sub)
			if !ok {
				break
			}
			switch {
			case v <= 0:
				p.failAt(deref(e.val), sub, "must be > 0, got %d", v)
			case v > core.MaxCapacity:
				p.failAt(deref(e.val), sub, "must be <= %d, got %d", int64(core.MaxCapacity), v)
			default:
				q.Capacity, capOK = v, true
			}
		case "refill_per_second":
			rateSeen = true
			sub := field + ".refill_per_second"
			v, ok := p.float(e.val, sub)
			if !ok {
				break
			}
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				p.failAt(deref(e.val), sub, "must be finite, got %v", v)
			case v <= 0:
				p.failAt(deref(e.val), sub, "must be > 0, got %v", v)
			case v > core.MaxRefillPerSecond:
				p.failAt(deref(e.val), sub, "must be <= %g, got %v", float64(core.MaxRefillPerSecond), v)
			default:
				q.RefillPerSecond, rateOK = v, true
			}
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
		p.failAt(deref(n), field, "%s", strings.TrimPrefix(err.Error(), core.ErrInvalidQuota.Error()+": "))
		return q, false
	}
	return q, true
}

// sequence returns n's items.
func (p *parser) sequence(n *yaml.Node, field string) []*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		p.failAt(n, field, "must be a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

// target is the (class, cost) part shared by routes and gRPC methods.
func (p *parser) target(cfg *Config, byName map[string]entry, item *yaml.Node, field string) (class string, cost int64, ok bool) {
	ok = true
	cost = 1
	if e, found := byName["class"]; !found {
		p.failAt(item, field+".class", "is required")
		ok = false
	} else if s, sok := p.str(e.val, field+".class"); !sok {
		ok = false
	} else {
		class = s
		if p.crossCheck {
			for _, tn := range sortedTiers(cfg.Tiers.Tiers) {
				if _, defined := cfg.Tiers.Tiers[tn].Classes[s]; !defined {
					p.failAt(deref(e.val), field+".class", "class %q is not defined in tier %q: its tenants' requests could not be resolved", s, tn)
					ok = false
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
		case v < 1 || v > core.MaxCost:
			p.failAt(deref(e.val), field+".cost", "must be 1 to %d, got %d", int64(core.MaxCost), v)
			ok = false
		default:
			cost = v
			if class == "" || !p.crossCheck {
				break
			}
			for _, tn := range sortedTiers(cfg.Tiers.Tiers) {
				t := cfg.Tiers.Tiers[tn]
				if q, defined := t.Classes[class]; defined && cost > q.Capacity {
					p.failAt(deref(e.val), field+".cost", "cost %d exceeds capacity %d of class %q in tier %q: such a request could never be admitted", cost, q.Capacity, class, tn)
					ok = false
					break
				}
				if t.Ceiling != nil && cost > t.Ceiling.Capacity {
					p.failAt(deref(e.val), field+".cost", "cost %d exceeds the ceiling capacity %d of tier %q: such a request could never be admitted", cost, t.Ceiling.Capacity, tn)
					ok = false
					break
				}
			}
		}
	}
	return class, cost, ok
}

var httpMethod = regexp.MustCompile(`^[A-Z][A-Z0-9_-]{0,31}$`)

func (p *parser) routes(cfg *Config, n *yaml.Node) {
	for i, item := range p.sequence(n, "routes") {
		field := fmt.Sprintf("routes[%d]", i)
		entries, ok := p.mapping(item, field, "method", "path", "class", "cost")
		if !ok {
			continue
		}
		item = deref(item)
		byName := map[string]entry{}
		for _, e := range entries {
			byName[e.name] = e
		}
		r := Route{Line: item.Line}
		good := true
		if e, found := byName["method"]; !found {
			p.failAt(item, field+".method", "is required (an HTTP method such as GET, or *)")
			good = false
		} else if s, sok := p.str(e.val, field+".method"); !sok {
			good = false
		} else if s != "*" && !httpMethod.MatchString(s) {
			hint := ""
			if up := strings.ToUpper(s); httpMethod.MatchString(up) {
				hint = fmt.Sprintf(" (methods are case-sensitive: did you mean %s?)", up)
			}
			p.failAt(deref(e.val), field+".method", "must be an upper-case HTTP method or *, got %q%s", s, hint)
			good = false
		} else {
			r.Method = s
		}
		if e, found := byName["path"]; !found {
			p.failAt(item, field+".path", "is required (the route pattern, e.g. /v1/users/:id)")
			good = false
		} else if s, sok := p.str(e.val, field+".path"); !sok {
			good = false
		} else if !strings.HasPrefix(s, "/") || len(s) > MaxPathLen || strings.ContainsFunc(s, isSpaceOrControl) {
			p.failAt(deref(e.val), field+".path", "must start with / and hold no spaces or control characters (at most %d bytes), got %q", MaxPathLen, s)
			good = false
		} else {
			r.Path = s
		}
		class, cost, tok := p.target(cfg, byName, item, field)
		if !good || !tok {
			continue
		}
		r.Class, r.Cost = class, cost
		k := routeKey{r.Method, r.Path}
		if j, dup := cfg.routes[k]; dup {
			p.failAt(item, field, "%s %s is already mapped at line %d", r.Method, r.Path, cfg.Routes[j].Line)
			continue
		}
		cfg.routes[k] = len(cfg.Routes)
		cfg.Routes = append(cfg.Routes, r)
	}
}

func sortedTiers(m map[string]core.Tier) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// splitMethod splits "/svc/method" into its parts.
func splitMethod(s string) (svc, method string, ok bool) {
	if !strings.HasPrefix(s, "/") {
		return "", "", false
	}
	svc, method, ok = strings.Cut(s[1:], "/")
	if !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return svc, method, true
}

func (p *parser) grpcMethods(cfg *Config, n *yaml.Node) {
	for i, item := range p.sequence(n, "grpc_methods") {
		field := fmt.Sprintf("grpc_methods[%d]", i)
		entries, ok := p.mapping(item, field, "method", "class", "cost")
		if !ok {
			continue
		}
		item = deref(item)
		byName := map[string]entry{}
		for _, e := range entries {
			byName[e.name] = e
		}
		m := GRPCMethod{Line: item.Line}
		good := true
		if e, found := byName["method"]; !found {
			p.failAt(item, field+".method", "is required (a full method name, /package.Service/Method)")
			good = false
		} else if s, sok := p.str(e.val, field+".method"); !sok {
			good = false
		} else if _, _, valid := splitMethod(s); !valid || len(s) > MaxPathLen || strings.ContainsFunc(s, isSpaceOrControl) {
			p.failAt(deref(e.val), field+".method", "must be /package.Service/Method or /package.Service/*, got %q", s)
			good = false
		} else {
			m.Method = s
		}
		class, cost, tok := p.target(cfg, byName, item, field)
		if !good || !tok {
			continue
		}
		m.Class, m.Cost = class, cost
		if j, dup := cfg.grpc[m.Method]; dup {
			p.failAt(item, field, "%s is already mapped at line %d", m.Method, cfg.GRPCMethods[j].Line)
			continue
		}
		cfg.grpc[m.Method] = len(cfg.GRPCMethods)
		cfg.GRPCMethods = append(cfg.GRPCMethods, m)
	}
}
