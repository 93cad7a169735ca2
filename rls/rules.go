package rls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls/internal/rlconfig"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Limits on a configuration: a file larger than maxConfigBytes (or a
// directory whose files are, together) is refused, and so is a descriptor
// tree deeper than maxDepth.
const (
	maxConfigBytes = 16 << 20
	maxDepth       = 32
)

// ruleClassPrefix begins the class (bucket) name of every rule of a
// [Config]: classes so named are the rules' own, resolved by [Rules], and
// never a tier file's.
const ruleClassPrefix = "envoy."

// Config is an envoyproxy/ratelimit configuration, read: domains of nested
// descriptor rules, in the reference's YAML format (see
// https://github.com/tollgate-go/tollgate/blob/main/docs/envoy.md#the-configuration). It
// is immutable; load a new one to change it.
type Config struct {
	domains map[string]*ruleNode
	rules   map[string]*rule // by class
}

// ruleNode is one level of a domain's descriptor tree.
type ruleNode struct {
	children  map[string]*ruleNode // by "key" or "key_value"
	wildcards []wildcard           // children keys holding a '*', in file order
	rule      *rule                // nil: no limit at this level
	share     bool                 // share_threshold
	pattern   string               // with share: the wildcard value, "*" included
}

// wildcard is a child key holding '*': each '*' matches any run of bytes,
// the empty one included, as the reference's wildcardMatch.
type wildcard struct {
	key   string   // the child's "key_value"
	parts []string // key split on '*', read once at load
}

func newWildcard(key string) wildcard { return wildcard{key: key, parts: strings.Split(key, "*")} }

// matches reports whether final ("key_value" of an entry) matches w: it
// begins with the first part and ends with the last, and the parts between
// appear in order, none overlapping another.
func (w wildcard) matches(final string) bool {
	p := w.parts
	if len(p) == 1 {
		return p[0] == final
	}
	first, last := p[0], p[len(p)-1]
	fixed := 0
	for _, s := range p {
		fixed += len(s)
	}
	if len(final) < fixed || !strings.HasPrefix(final, first) || !strings.HasSuffix(final, last) {
		return false
	}
	rest := final[len(first) : len(final)-len(last)]
	for _, s := range p[1 : len(p)-1] {
		i := strings.Index(rest, s)
		if i < 0 {
			return false
		}
		rest = rest[i+len(s):]
	}
	return true
}

// rule is one descriptor's rate_limit.
type rule struct {
	path      string // the reference's full key: domain.key_value.key...
	class     string // bucket name, ruleClassPrefix...
	quota     quota.Quota
	limit     *rlsv3.RateLimitResponse_RateLimit // as the reference answers it
	unlimited bool
	zero      bool // requests_per_unit 0: every request is over limit
	shadow    bool
	quotaMode bool
	metadata  *structpb.Struct // the descriptor's metadata; nil: none
	name      string
	replaces  map[string]struct{} // names replaced, read once at load
	// the tollgate extension: the bucket is the services' (tenant, class)
	tenantKey   string
	tierKey     string
	tenantClass string
}

// The keys each level of a file may hold: the reference's, plus tollgate's
// own block on a descriptor.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata", "tollgate"}
	rateLimitKeys  = []string{"requests_per_unit", "unit", "unit_multiplier", "unlimited", "name", "replaces"}
	replacesKeys   = []string{"name"}
	tollgateKeys   = []string{"tenant", "tier", "class"}
)

// The reference's YAML, read into rlconfig's types (tollgate-rls convert
// and its xDS client use the same).
type (
	yamlRoot       = rlconfig.Root
	yamlDescriptor = rlconfig.Descriptor
)

// ParseConfig reads one envoyproxy/ratelimit configuration file (one
// domain) named name. The error names the file and line of the first
// problem: an unknown key, a bad unit, a duplicate descriptor, and the
// other mistakes the reference refuses.
func ParseConfig(name string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*ruleNode{}, rules: map[string]*rule{}}
	if err := c.add(name, data, false); err != nil {
		return nil, err
	}
	return c, nil
}

// ConfigFile is one envoyproxy/ratelimit configuration document (one
// domain) and the name its errors cite.
type ConfigFile struct {
	Name string
	Data []byte
}

// LoadOption configures how [LoadConfig], [ParseConfigs] and
// [Rules.Watch] read several files. Nil ones are skipped.
type LoadOption interface{ applyLoad(*loadConfig) }

type loadOptionFunc func(*loadConfig)

func (f loadOptionFunc) applyLoad(c *loadConfig) { f(c) }

type loadConfig struct {
	merge bool
}

func newLoadConfig(opts []LoadOption) loadConfig {
	var c loadConfig
	for _, o := range opts {
		if o != nil {
			o.applyLoad(&c)
		}
	}
	return c
}

// MergeDomains, on, merges files holding the same domain as the
// reference's MERGE_DOMAIN_CONFIG=true does: a later file's descriptors
// join the domain's, and a descriptor at the top of two files (the same
// key and value) is an error, whatever lies below it. Off, the default, a
// domain in two files is an error.
func MergeDomains(on bool) LoadOption {
	return loadOptionFunc(func(c *loadConfig) { c.merge = on })
}

// ParseConfigs reads several configuration documents into one
// configuration, as [LoadConfig] reads a directory's files: each holds one
// domain, a domain in two is an error (unless [MergeDomains]), and
// together they are bounded as a directory is. It is how configurations
// pushed over xDS are read.
func ParseConfigs(files []ConfigFile, opts ...LoadOption) (*Config, error) {
	lc := newLoadConfig(opts)
	c := &Config{domains: map[string]*ruleNode{}, rules: map[string]*rule{}}
	total := 0
	for _, f := range files {
		total += len(f.Data)
		if total > maxConfigBytes {
			return nil, configError(f.Name, 0, "configurations larger than %d bytes together", maxConfigBytes)
		}
		if err := c.add(f.Name, f.Data, lc.merge); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// LoadConfig reads path: one file, or every *.yaml and *.yml file of a
// directory (not recursively, in name order), each holding one domain. A
// domain in two files is an error, as in the reference, unless
// [MergeDomains].
func LoadConfig(path string, opts ...LoadOption) (*Config, error) {
	lc := newLoadConfig(opts)
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: rls: %w", core.ErrInvalidConfig, err)
	}
	files := []string{path}
	if st.IsDir() {
		files = files[:0]
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("%w: rls: %w", core.ErrInvalidConfig, err)
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
	}
	c := &Config{domains: map[string]*ruleNode{}, rules: map[string]*rule{}}
	total := 0
	for _, f := range files {
		data, err := readBounded(f, maxConfigBytes-total)
		if err != nil {
			return nil, err
		}
		total += len(data)
		if err := c.add(f, data, lc.merge); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// readBounded reads at most limit bytes of file, failing beyond.
func readBounded(file string, limit int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: rls: %w", core.ErrInvalidConfig, err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: rls: %s: %w", core.ErrInvalidConfig, file, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: rls: %s: configuration larger than %d bytes", core.ErrInvalidConfig, file, maxConfigBytes)
	}
	return data, nil
}

func configError(file string, line int, format string, args ...any) error {
	if line > 0 {
		return fmt.Errorf("%w: rls: %s:%d: %s", core.ErrInvalidConfig, file, line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%w: rls: %s: %s", core.ErrInvalidConfig, file, fmt.Sprintf(format, args...))
}

// checkKeys refuses a key that level does not hold, naming it and its line.
func checkKeys(file string, n *yaml.Node, depth int) error {
	if depth > maxDepth*3+4 {
		return configError(file, n.Line, "descriptors nested deeper than %d", maxDepth)
	}
	var walk func(n *yaml.Node, keys []string, d int) error
	walk = func(n *yaml.Node, keys []string, d int) error {
		if d > maxDepth*3+4 {
			return configError(file, n.Line, "descriptors nested deeper than %d", maxDepth)
		}
		if n.Kind != yaml.MappingNode {
			return configError(file, n.Line, "expected a mapping")
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if !slices.Contains(keys, k.Value) {
				return configError(file, k.Line, "unknown key %q (want one of %s)", k.Value, strings.Join(keys, ", "))
			}
			var sub []string
			list := false
			switch k.Value {
			case "descriptors":
				sub, list = descriptorKeys, true
			case "rate_limit":
				sub = rateLimitKeys
			case "replaces":
				sub, list = replacesKeys, true
			case "tollgate":
				sub = tollgateKeys
			case "metadata":
				// the user's own: any keys, read by metadataStruct
				if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
					return configError(file, v.Line, "key %q takes a mapping", k.Value)
				}
				continue
			default:
				if v.Kind != yaml.ScalarNode {
					return configError(file, v.Line, "key %q takes a single value", k.Value)
				}
				continue
			}
			if list {
				if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
					continue
				}
				if v.Kind != yaml.SequenceNode {
					return configError(file, v.Line, "key %q takes a list", k.Value)
				}
				for _, e := range v.Content {
					if err := walk(e, sub, d+1); err != nil {
						return err
					}
				}
			} else if err := walk(v, sub, d+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(n, rootKeys, depth)
}

// add reads one file into c; merge: a domain c holds already takes the
// file's descriptors, as the reference's MERGE_DOMAIN_CONFIG.
func (c *Config) add(file string, data []byte, merge bool) error {
	if len(data) > maxConfigBytes {
		return configError(file, 0, "configuration larger than %d bytes", maxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return configError(file, 0, "empty file")
		}
		return configError(file, 0, "%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return configError(file, extra.Line, "more than one YAML document")
	}
	if len(doc.Content) != 1 {
		return configError(file, 0, "empty file")
	}
	root := doc.Content[0]
	if err := checkKeys(file, root, 0); err != nil {
		return err
	}
	var y yamlRoot
	if err := root.Decode(&y); err != nil {
		return configError(file, 0, "%v", err)
	}
	lines(root, &y)
	if y.Domain == "" {
		return configError(file, root.Line, "config file cannot have empty domain")
	}
	top, dup := c.domains[y.Domain]
	if dup && !merge {
		return configError(file, root.Line, "duplicate domain %q in config file", y.Domain)
	}
	if !dup {
		top = &ruleNode{children: map[string]*ruleNode{}}
	}
	if err := c.load(file, top, y.Domain, y.Domain+".", y.Descriptors, 0); err != nil {
		return err
	}
	c.domains[y.Domain] = top
	return nil
}

// lines copies each descriptor's line from the node tree.
func lines(root *yaml.Node, y *yamlRoot) {
	var walk func(n *yaml.Node, ds []yamlDescriptor)
	walk = func(n *yaml.Node, ds []yamlDescriptor) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != "descriptors" {
				continue
			}
			seq := n.Content[i+1]
			for j, e := range seq.Content {
				if j < len(ds) {
					ds[j].Line = e.Line
					walk(e, ds[j].Descriptors)
				}
			}
		}
	}
	walk(root, y.Descriptors)
}

// load reads descriptors into parent, as the reference's loadDescriptors;
// depth is how many levels are above ds (0 for a domain's descriptors).
func (c *Config) load(file string, parent *ruleNode, domain, parentKey string, ds []yamlDescriptor, depth int) error {
	if depth >= maxDepth && len(ds) > 0 {
		return configError(file, ds[0].Line, "descriptors nested deeper than %d", maxDepth)
	}
	for _, d := range ds {
		if d.Key == "" {
			return configError(file, d.Line, "descriptor has empty key")
		}
		finalKey := d.Key
		if d.Value != "" {
			finalKey += "_" + d.Value
		}
		path := parentKey + finalKey
		if _, dup := parent.children[finalKey]; dup {
			return configError(file, d.Line, "duplicate descriptor composite key '%s'", path)
		}
		n := &ruleNode{children: map[string]*ruleNode{}}
		wild := strings.Contains(finalKey, "*")
		if d.ShareThreshold {
			if !wild {
				return configError(file, d.Line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)
			}
			n.share, n.pattern = true, strings.TrimPrefix(finalKey, d.Key+"_")
		}
		// read at every level, as the reference does; sent with a rule's answers
		md, err := metadataStruct(d.Metadata)
		if err != nil {
			return configError(file, d.Line, "error parsing metadata: %v", err)
		}
		if d.RateLimit != nil || d.Tollgate != nil {
			r, err := c.rule(file, domain, path, d)
			if err != nil {
				return err
			}
			r.metadata = md
			n.rule = r
		}
		if wild {
			parent.wildcards = append(parent.wildcards, newWildcard(finalKey))
		}
		if err := c.load(file, n, domain, path+".", d.Descriptors, depth+1); err != nil {
			return err
		}
		parent.children[finalKey] = n
	}
	return nil
}

// rule reads one descriptor's rate_limit (and tollgate block).
func (c *Config) rule(file, domain, path string, d yamlDescriptor) (*rule, error) {
	r := &rule{path: path, shadow: d.ShadowMode, quotaMode: d.QuotaMode, class: ruleClass(path)}
	if t := d.Tollgate; t != nil {
		if d.RateLimit != nil {
			return nil, configError(file, d.Line, "a descriptor with tollgate.tenant takes its quota from the tier file and overrides: remove its rate_limit")
		}
		if t.Tenant == "" {
			return nil, configError(file, d.Line, "tollgate: tenant (the descriptor entry holding the tenant ID) is required")
		}
		r.tenantKey, r.tierKey, r.tenantClass = t.Tenant, t.Tier, t.Class
		if r.tenantClass == "" {
			r.tenantClass = quota.DefaultClass
		}
		if err := quota.ValidateName(r.tenantClass); err != nil {
			return nil, configError(file, d.Line, "tollgate: class: %v", err)
		}
		if strings.HasPrefix(r.tenantClass, ruleClassPrefix) {
			return nil, configError(file, d.Line, "tollgate: class %q: the prefix %q is kept for rules", r.tenantClass, ruleClassPrefix)
		}
		c.rules[r.class] = r
		return r, nil
	}
	y := d.RateLimit
	unit, validUnit := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.Unit)]
	validUnit = validUnit && unit != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case y.Unlimited && validUnit:
		return nil, configError(file, d.Line, "should not specify rate limit unit when unlimited")
	case !y.Unlimited && !validUnit:
		return nil, configError(file, d.Line, "invalid rate limit unit '%s'", y.Unit)
	}
	r.unlimited, r.name = y.Unlimited, y.Name
	for _, rep := range y.Replaces {
		switch {
		case rep.Name == "":
			return nil, configError(file, d.Line, "should not have an empty replaces entry")
		case rep.Name == y.Name:
			return nil, configError(file, d.Line, "replaces should not contain name of same descriptor")
		}
		if r.replaces == nil {
			r.replaces = make(map[string]struct{}, len(y.Replaces))
		}
		r.replaces[rep.Name] = struct{}{}
	}
	u := rlsv3.RateLimitResponse_RateLimit_Unit(unit)
	r.limit = &rlsv3.RateLimitResponse_RateLimit{Name: y.Name, RequestsPerUnit: y.RequestsPerUnit, Unit: u}
	if !r.unlimited {
		if y.RequestsPerUnit == 0 {
			r.zero = true
		} else {
			q, err := unitQuota(y.RequestsPerUnit, u, max(y.UnitMultiplier, 1))
			if err != nil {
				return nil, configError(file, d.Line, "%v", err)
			}
			r.quota = q
		}
	}
	c.rules[r.class] = r
	return r, nil
}

// metadataStruct is a descriptor's metadata as the reference sends it
// (RESPONSE_DYNAMIC_METADATA): a JSON-like struct, nested mappings' keys
// written as strings; nil for none. A value no struct can hold (a YAML
// timestamp, binary) is an error.
func metadataStruct(m map[string]any) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	var conv func(v any) any
	conv = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[k] = conv(e)
			}
			return out
		case map[any]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[fmt.Sprint(k)] = conv(e)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = conv(e)
			}
			return out
		}
		return v
	}
	return structpb.NewStruct(conv(m).(map[string]any))
}

// unitQuota is the token bucket of n requests per mult units: capacity n,
// refilled evenly over the window.
func unitQuota(n uint32, u rlsv3.RateLimitResponse_RateLimit_Unit, mult uint32) (quota.Quota, error) {
	secs, ok := rlconfig.Window(u.String(), mult)
	if !ok {
		return quota.Quota{}, fmt.Errorf("invalid rate limit unit %v", u)
	}
	return rlconfig.Quota(n, secs)
}

// ruleClass is the bucket name of the rule at path: readable, unique (a
// hash of the path), at most 64 bytes, in core's name alphabet.
func ruleClass(path string) string {
	sum := sha256.Sum256([]byte(path))
	h := hex.EncodeToString(sum[:4])
	var b strings.Builder
	b.WriteString(ruleClassPrefix)
	for i := 0; i < len(path) && b.Len() < 64-len(h)-1; i++ {
		c := path[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteByte('.')
	b.WriteString(h)
	return b.String()
}

// Domains lists the configuration's domains in name order.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// match finds the rule for descriptor d of domain, as the reference's
// GetLimit: at each entry the key and value, else a wildcard value, else
// the key alone (a wildcard value holds '*'s, each matching any run of
// bytes, and the first in file order that matches wins); a rule applies when it sits at the descriptor's last
// entry. shared holds, per entry, the wildcard value that replaces the
// entry's value in the bucket's identity (share_threshold), or "".
func (c *Config) match(domain string, d *ratelimitv3.RateLimitDescriptor) (r *rule, shared []string) {
	n := c.domains[domain]
	if n == nil {
		return nil, nil
	}
	es := d.GetEntries()
	for i, e := range es {
		final := e.GetKey() + "_" + e.GetValue()
		next := n.children[final]
		viaWildcard := false
		if next == nil {
			for _, w := range n.wildcards {
				if w.matches(final) {
					next, viaWildcard = n.children[w.key], true
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.GetKey()]
		}
		if next == nil {
			return nil, nil
		}
		if viaWildcard && next.share {
			if shared == nil {
				shared = make([]string, len(es))
			}
			shared[i] = next.pattern
		}
		if i == len(es)-1 {
			if next.rule == nil {
				return nil, nil
			}
			return next.rule, shared
		}
		if len(next.children) == 0 {
			return nil, nil
		}
		n = next
	}
	return nil, nil
}
