package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls/internal/rlconfig"
	"go.yaml.in/yaml/v3"
)

// maxInput bounds what convert reads: a larger input is refused, never
// cut short.
const maxInput = 16 << 20

// defaultTier is the tier that descriptors without a tier entry fill.
const defaultTier = "free"

// limitQuota maps a fixed window to a token bucket, as tollgate-rls serves
// it (rlconfig.Quota): the window's requests are the burst, refilled evenly
// over the window.
func limitQuota(l *rlconfig.RateLimit) (quota.Quota, error) {
	secs, ok := rlconfig.Window(l.Unit, l.UnitMultiplier)
	if !ok {
		return quota.Quota{}, fmt.Errorf("unknown unit %q", l.Unit)
	}
	return rlconfig.Quota(l.RequestsPerUnit, secs)
}

// window says the limit as the reference states it: "2 per minute", "5
// per 2 hours".
func window(l *rlconfig.RateLimit) string {
	unit := strings.ToLower(l.Unit)
	if l.UnitMultiplier > 1 {
		return fmt.Sprintf("%d per %d %ss", l.RequestsPerUnit, l.UnitMultiplier, unit)
	}
	return fmt.Sprintf("%d per %s", l.RequestsPerUnit, unit)
}

// class is one converted class: its quota, and the window it came from.
type class struct {
	q      quota.Quota
	window string
}

// rate writes a refill rate exactly (the shortest decimal that reads back
// as the same float64), followed, when that decimal is long (2 per minute
// is 0.03333333333333333), by a comment with the window it came from.
func rate(c class) string {
	r := strconv.FormatFloat(c.q.RefillPerSecond, 'g', -1, 64)
	digits := strings.TrimLeft(strings.NewReplacer(".", "", "-", "").Replace(strings.SplitN(r, "e", 2)[0]), "0")
	if len(digits) > 6 {
		return r + "} # " + c.window
	}
	return r + "}"
}

// converter collects tiers and what it could not convert.
type converter struct {
	tiers    map[string]map[string]class
	problems []string
}

func (c *converter) problem(path, format string, args ...any) {
	c.problems = append(c.problems, path+": "+fmt.Sprintf(format, args...))
}

func (c *converter) set(path, tier, name string, l *rlconfig.RateLimit) {
	if l == nil {
		return
	}
	if l.Unlimited {
		c.problem(path, "unlimited has no tollgate equivalent (every class has a quota); left out")
		return
	}
	q, err := limitQuota(l)
	if err != nil {
		c.problem(path, "%v", err)
		return
	}
	if c.tiers[tier] == nil {
		c.tiers[tier] = map[string]class{}
	}
	if _, dup := c.tiers[tier][name]; dup {
		c.problem(path, "tier %q class %q given twice; the first is kept", tier, name)
		return
	}
	c.tiers[tier][name] = class{q: q, window: window(l)}
}

// node converts one descriptor under tier (known so far) at path.
func (c *converter) node(d rlconfig.Descriptor, tier, path string, depth int) {
	path += "/" + d.Key
	if d.Value != "" {
		path += "=" + d.Value
	}
	if d.ShadowMode {
		c.problem(path, "shadow_mode is a limiter option in tollgate (core.WithShadow, core.WithShadowClasses); not converted")
	}
	if d.QuotaMode {
		c.problem(path, "quota_mode has no tier-file equivalent; not converted")
	}
	if len(d.Metadata) > 0 {
		c.problem(path, "metadata has no tier-file equivalent (tollgate-rls sends it with RLS_CONFIG and RESPONSE_DYNAMIC_METADATA); not converted")
	}
	if d.Tollgate != nil {
		c.problem(path, "the tollgate block has no tier-file equivalent (tollgate-rls serves it with RLS_CONFIG); left out")
		return
	}
	if d.ShareThreshold || strings.Contains(d.Value, "*") {
		c.problem(path, "a wildcard value has no tier-file equivalent (tollgate-rls serves it with RLS_CONFIG); left out")
		return
	}
	if l := d.RateLimit; l != nil && (l.Name != "" || len(l.Replaces) > 0) {
		c.problem(path, "name and replaces have no tier-file equivalent (tollgate-rls serves them with RLS_CONFIG); not converted")
	}
	switch {
	case d.Key == "tier" && d.Value != "" && depth == 0:
		c.set(path, d.Value, quota.DefaultClass, d.RateLimit)
		for _, n := range d.Descriptors {
			c.node(n, d.Value, path, depth+1)
		}
	case d.Key == "tenant" && d.Value == "" && depth == 0:
		c.set(path, tier, quota.DefaultClass, d.RateLimit)
		for _, n := range d.Descriptors {
			c.node(n, tier, path, depth+1)
		}
	case d.Key == "tenant" && d.Value != "":
		c.problem(path, "a limit for one tenant is an override in tollgate: tollgate override set %s ...", d.Value)
	case d.Key == "class" && d.Value != "":
		if err := quota.ValidateName(d.Value); err != nil {
			c.problem(path, "%v", err)
			return
		}
		c.set(path, tier, d.Value, d.RateLimit)
		if len(d.Descriptors) > 0 {
			c.problem(path, "descriptors below a class have no tollgate equivalent; left out")
		}
	default:
		c.problem(path, "only tier, tenant and class descriptors map to tollgate tiers; left out")
	}
}

// convert turns an envoyproxy/ratelimit YAML document into a tollgate tier
// file. problems lists what it left out; the file holds the rest.
func convert(data []byte) (out []byte, problems []string, err error) {
	var in rlconfig.Root
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelled key is an error, never a default
	if err := dec.Decode(&in); err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("%s", knownFieldsError.ReplaceAllString(err.Error(), ""))
	}
	c := &converter{tiers: map[string]map[string]class{}}
	for _, d := range in.Descriptors {
		c.node(d, defaultTier, in.Domain, 0)
	}
	if len(c.tiers) == 0 {
		return nil, c.problems, fmt.Errorf("no limit to convert")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Converted from the envoyproxy/ratelimit domain %q by tollgate-rls convert.\n", in.Domain)
	b.WriteString("# Each fixed window became a token bucket: capacity = requests_per_unit,\n")
	b.WriteString("# refill_per_second = requests_per_unit / unit (see docs/envoy.md).\n")
	b.WriteString("version: 1\n")
	names := make([]string, 0, len(c.tiers))
	for n := range c.tiers {
		names = append(names, n)
	}
	slices.Sort(names)
	def := defaultTier
	if c.tiers[def] == nil {
		def = names[0]
	}
	fmt.Fprintf(&b, "default_tier: %s\ntiers:\n", strconv.Quote(def))
	for _, tier := range names {
		fmt.Fprintf(&b, "  %s:\n    classes:\n", strconv.Quote(tier))
		classes := make([]string, 0, len(c.tiers[tier]))
		for n := range c.tiers[tier] {
			classes = append(classes, n)
		}
		slices.Sort(classes)
		for _, name := range classes {
			// quoted: a class named null, true or 1 is a string key
			cl := c.tiers[tier][name]
			fmt.Fprintf(&b, "      %s: {capacity: %d, refill_per_second: %s\n", strconv.Quote(name), cl.q.Capacity, rate(cl))
		}
	}
	out = []byte(b.String())
	if _, err := config.Parse("converted", out); err != nil {
		return nil, c.problems, fmt.Errorf("the converted file does not load: %w", err)
	}
	return out, c.problems, nil
}

// knownFieldsError is the Go type yaml names in an unknown-key error,
// which says nothing to a user.
var knownFieldsError = regexp.MustCompile(` in type [\w.]+`)

// readBounded reads r whole, refusing more than maxInput bytes.
func readBounded(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err == nil && len(data) > maxInput {
		err = fmt.Errorf("%s: larger than %d bytes; refused", name, maxInput)
	}
	return data, err
}

// convertMain is "tollgate-rls convert [file]": exit 0 when everything
// converted, 1 when something was left out (the file holds the rest), 2 on
// bad input.
func convertMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var data []byte
	var err error
	switch len(args) {
	case 0:
		data, err = readBounded(stdin, "stdin")
	case 1:
		var f *os.File
		if f, err = os.Open(args[0]); err == nil {
			data, err = readBounded(f, args[0])
			_ = f.Close()
		}
	default:
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "tollgate-rls convert:", err)
		return 2
	}
	out, problems, err := convert(data)
	for _, p := range problems {
		fmt.Fprintln(stderr, "tollgate-rls convert: left out:", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tollgate-rls convert:", err)
		return 2
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintln(stderr, "tollgate-rls convert:", err)
		return 2
	}
	if len(problems) > 0 {
		return 1
	}
	return 0
}
