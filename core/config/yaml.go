package config

// The YAML plumbing the schema is read with: one document, strict mappings
// (no unknown or repeated keys, no merge keys), typed scalars, and errors
// that name the file, the line and the field. Nothing here knows the schema.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// parser reads YAML nodes, collecting every problem as a FieldError.
type parser struct {
	file string
	errs []*FieldError
}

func (p *parser) fail(line int, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// reporting reports whether another problem would still be reported
// (fewer than maxErrors so far): a check may skip the work of describing
// one otherwise.
func (p *parser) reporting() bool { return len(p.errs) < maxErrors }

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
	if n, loop := expandedSize(&doc, maxExpandedNodes); loop != nil {
		p.fail(loop.Line, "", "alias *%s is inside the node it names", loop.Value)
		return nil, false
	} else if n > maxExpandedNodes {
		p.fail(0, "", "aliases expand the file to more than %d YAML nodes, the most it may hold; write fewer aliases of large values", maxExpandedNodes)
		return nil, false
	}
	return doc.Content[0], true
}

// maxExpandedNodes bounds the nodes a document stands for once every alias
// is replaced by a copy of the node it names: about the most a file of
// MaxFileSize can hold without aliases (a node takes at least a byte). The
// YAML library bounds alias expansion only when it decodes into Go values,
// not into the node tree read here, and the schema reads an aliased value
// once per alias: without this bound a small file of aliases of aliases (a
// "billion laughs" file) would be expanded until memory runs out.
const maxExpandedNodes = MaxFileSize

// expandedSize returns how many nodes n stands for with its aliases
// expanded, counting past limit only as limit+1; it takes time linear in
// the nodes of the file, whatever their expansion. loop is an alias found
// inside the node it names, whose expansion would never end.
func expandedSize(n *yaml.Node, limit int) (size int, loop *yaml.Node) {
	memo := map[*yaml.Node]int{} // -1 while the node's children are counted
	var count func(n *yaml.Node) int
	count = func(n *yaml.Node) int {
		alias := n
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			return 1
		}
		if v, seen := memo[n]; seen {
			if v < 0 && loop == nil {
				loop = alias
			}
			if v < 0 {
				return limit + 1
			}
			return v
		}
		memo[n] = -1
		total := 1
		for _, c := range n.Content {
			if total += count(c); total > limit {
				total = limit + 1
				break
			}
		}
		memo[n] = total
		return total
	}
	return count(n), loop
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

func (p *parser) bool(n *yaml.Node, field string) (v, ok bool) {
	s, ok := p.scalar(n, field)
	if !ok {
		return false, false
	}
	if s.ShortTag() != "!!bool" || s.Decode(&v) != nil {
		p.failAt(s, field, "must be true or false, got %q", s.Value)
		return false, false
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

// sequence returns n's items.
func (p *parser) sequence(n *yaml.Node, field string) []*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		p.failAt(n, field, "must be a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}
