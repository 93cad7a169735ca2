package grafana

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Node is a parsed expression of the PromQL subset: *Selector, *Call, *Agg
// or Number.
type Node interface{ node() }

// Selector is a vector selector, metric{matchers}, with an optional range.
type Selector struct {
	Metric   string
	Matchers []Matcher
	// Range is the range of a range selector (metric[5m]); 0 otherwise.
	Range time.Duration
}

// Matcher is one label matcher: Op is "=", "!=", "=~" or "!~".
type Matcher struct{ Label, Op, Value string }

// Call is rate(selector[range]), label_values(metric, label) or
// histogram_quantile(q, expr).
type Call struct {
	Func string
	Args []Node
	// Label is label_values' label.
	Label string
}

// Agg is an aggregation: sum or topk (Param is topk's k), by labels.
type Agg struct {
	Op    string
	By    []string
	Param Node
	Expr  Node
}

// Number is a numeric literal.
type Number float64

func (*Selector) node() {}
func (*Call) node()     {}
func (*Agg) node()      {}
func (Number) node()    {}

var (
	aggregations = map[string]bool{"sum": true, "topk": true}
	functions    = map[string]bool{"rate": true, "histogram_quantile": true, "label_values": true}
)

// Parse parses expr, which must be in the subset the dashboard uses:
//
//	expr     = agg | call | selector | number
//	agg      = ("sum" | "topk") [by] "(" [number ","] expr ")" [by]
//	by       = "by" "(" label {"," label} ")"
//	call     = "rate" "(" selector range ")"
//	         | "histogram_quantile" "(" number "," expr ")"
//	         | "label_values" "(" metric "," label ")"
//	selector = metric ["{" [matcher {"," matcher}] "}"]
//
// Anything else (another function, a binary operator, an unexpanded
// $variable) is an error, so a dashboard query this package cannot check
// cannot slip in.
func Parse(expr string) (Node, error) {
	p := &parser{lex: lexer{s: expr}}
	p.next()
	n, err := p.expr()
	if err != nil {
		return nil, fmt.Errorf("promql %q: %w", expr, err)
	}
	if p.tok.kind != tEOF {
		return nil, fmt.Errorf("promql %q: unexpected %q at %d", expr, p.tok.text, p.tok.pos)
	}
	return n, nil
}

// Selectors returns every selector in n, in order.
func Selectors(n Node) []*Selector {
	switch n := n.(type) {
	case *Selector:
		return []*Selector{n}
	case *Call:
		var s []*Selector
		for _, a := range n.Args {
			s = append(s, Selectors(a)...)
		}
		return s
	case *Agg:
		return Selectors(n.Expr)
	}
	return nil
}

// Groupings returns the label lists of every "by" in n, each with the
// selectors it groups.
func Groupings(n Node) map[*Agg][]*Selector {
	out := map[*Agg][]*Selector{}
	var walk func(Node)
	walk = func(n Node) {
		switch n := n.(type) {
		case *Agg:
			out[n] = Selectors(n.Expr)
			walk(n.Expr)
		case *Call:
			for _, a := range n.Args {
				walk(a)
			}
		}
	}
	walk(n)
	return out
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tString
	tDuration
	tPunct
)

type token struct {
	kind tokKind
	text string
	pos  int
}

type lexer struct {
	s   string
	pos int
	// inRange: after '[', a duration comes
	inRange bool
}

func (l *lexer) next() (token, error) {
	for l.pos < len(l.s) && strings.IndexByte(" \t\n", l.s[l.pos]) >= 0 {
		l.pos++
	}
	start := l.pos
	if l.pos >= len(l.s) {
		return token{kind: tEOF, pos: start}, nil
	}
	c := l.s[l.pos]
	switch {
	case l.inRange:
		l.inRange = false
		end := strings.IndexByte(l.s[l.pos:], ']')
		if end < 0 {
			return token{}, fmt.Errorf("unterminated range at %d", start)
		}
		l.pos += end
		return token{tDuration, strings.TrimSpace(l.s[start:l.pos]), start}, nil
	case isIdentStart(c):
		for l.pos < len(l.s) && (isIdentStart(l.s[l.pos]) || l.s[l.pos] >= '0' && l.s[l.pos] <= '9') {
			l.pos++
		}
		return token{tIdent, l.s[start:l.pos], start}, nil
	case c >= '0' && c <= '9' || c == '.':
		for l.pos < len(l.s) && (l.s[l.pos] >= '0' && l.s[l.pos] <= '9' || l.s[l.pos] == '.') {
			l.pos++
		}
		return token{tNumber, l.s[start:l.pos], start}, nil
	case c == '"':
		l.pos++
		var b strings.Builder
		for l.pos < len(l.s) && l.s[l.pos] != '"' {
			if l.s[l.pos] == '\\' && l.pos+1 < len(l.s) {
				l.pos++
			}
			b.WriteByte(l.s[l.pos])
			l.pos++
		}
		if l.pos >= len(l.s) {
			return token{}, fmt.Errorf("unterminated string at %d", start)
		}
		l.pos++
		return token{tString, b.String(), start}, nil
	}
	for _, op := range []string{"=~", "!~", "!=", "=", "(", ")", "{", "}", "[", "]", ","} {
		if strings.HasPrefix(l.s[l.pos:], op) {
			l.pos += len(op)
			if op == "[" {
				l.inRange = true
			}
			return token{tPunct, op, start}, nil
		}
	}
	return token{}, fmt.Errorf("unexpected %q at %d", c, start)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

type parser struct {
	lex lexer
	tok token
	err error
}

func (p *parser) next() {
	if p.err != nil {
		return
	}
	p.tok, p.err = p.lex.next()
}

func (p *parser) expect(punct string) error {
	if p.err != nil {
		return p.err
	}
	if p.tok.kind != tPunct || p.tok.text != punct {
		return fmt.Errorf("want %q at %d, got %q", punct, p.tok.pos, p.tok.text)
	}
	p.next()
	return p.err
}

func (p *parser) expr() (Node, error) {
	if p.err != nil {
		return nil, p.err
	}
	switch p.tok.kind {
	case tNumber:
		v, err := strconv.ParseFloat(p.tok.text, 64)
		if err != nil {
			return nil, err
		}
		p.next()
		return Number(v), p.err
	case tIdent:
		name := p.tok.text
		switch {
		case aggregations[name]:
			p.next()
			return p.agg(name)
		case functions[name]:
			p.next()
			return p.call(name)
		}
		return p.selector()
	}
	return nil, fmt.Errorf("unexpected %q at %d", p.tok.text, p.tok.pos)
}

func (p *parser) labels() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var ls []string
	for p.tok.kind == tIdent {
		ls = append(ls, p.tok.text)
		p.next()
		if p.tok.kind == tPunct && p.tok.text == "," {
			p.next()
		}
	}
	return ls, p.expect(")")
}

func (p *parser) agg(op string) (Node, error) {
	a := &Agg{Op: op}
	var err error
	if p.tok.kind == tIdent && p.tok.text == "by" {
		p.next()
		if a.By, err = p.labels(); err != nil {
			return nil, err
		}
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	if op == "topk" {
		if a.Param, err = p.expr(); err != nil {
			return nil, err
		}
		if _, ok := a.Param.(Number); !ok {
			return nil, fmt.Errorf("topk wants a number first")
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
	if a.Expr, err = p.expr(); err != nil {
		return nil, err
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	if p.tok.kind == tIdent && p.tok.text == "by" && a.By == nil {
		p.next()
		if a.By, err = p.labels(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (p *parser) call(name string) (Node, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	c := &Call{Func: name}
	switch name {
	case "rate":
		s, err := p.selector()
		if err != nil {
			return nil, err
		}
		if s.(*Selector).Range == 0 {
			return nil, fmt.Errorf("rate wants a range selector")
		}
		c.Args = []Node{s}
	case "histogram_quantile":
		q, err := p.expr()
		if err != nil {
			return nil, err
		}
		if _, ok := q.(Number); !ok {
			return nil, fmt.Errorf("histogram_quantile wants a number first")
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		c.Args = []Node{q, e}
	case "label_values":
		s, err := p.selector()
		if err != nil {
			return nil, err
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		if p.tok.kind != tIdent {
			return nil, fmt.Errorf("label_values wants a label name at %d", p.tok.pos)
		}
		c.Args, c.Label = []Node{s}, p.tok.text
		p.next()
	}
	return c, p.expect(")")
}

func (p *parser) selector() (Node, error) {
	if p.tok.kind != tIdent {
		return nil, fmt.Errorf("want a metric name at %d, got %q", p.tok.pos, p.tok.text)
	}
	s := &Selector{Metric: p.tok.text}
	p.next()
	if p.tok.kind == tPunct && p.tok.text == "{" {
		p.next()
		for p.tok.kind == tIdent {
			m := Matcher{Label: p.tok.text}
			p.next()
			if p.tok.kind != tPunct || !strings.Contains("= != =~ !~", p.tok.text) {
				return nil, fmt.Errorf("want a matcher operator at %d", p.tok.pos)
			}
			m.Op = p.tok.text
			p.next()
			if p.tok.kind != tString {
				return nil, fmt.Errorf("want a string at %d", p.tok.pos)
			}
			m.Value = p.tok.text
			if strings.Contains(m.Value, "$") {
				return nil, fmt.Errorf("unexpanded variable in %q", m.Value)
			}
			if strings.HasSuffix(m.Op, "~") {
				if _, err := regexp.Compile("^(?:" + m.Value + ")$"); err != nil {
					return nil, err
				}
			}
			s.Matchers = append(s.Matchers, m)
			p.next()
			if p.tok.kind == tPunct && p.tok.text == "," {
				p.next()
			}
		}
		if err := p.expect("}"); err != nil {
			return nil, err
		}
	}
	if p.tok.kind == tPunct && p.tok.text == "[" {
		p.next()
		if p.tok.kind != tDuration {
			return nil, fmt.Errorf("want a duration at %d", p.tok.pos)
		}
		d, err := time.ParseDuration(p.tok.text)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bad range %q", p.tok.text)
		}
		s.Range = d
		p.next()
		if err := p.expect("]"); err != nil {
			return nil, err
		}
	}
	return s, p.err
}

// Matches reports whether labels satisfy every matcher.
func (s *Selector) Matches(labels map[string]string) bool {
	for _, m := range s.Matchers {
		v := labels[m.Label]
		var ok bool
		switch m.Op {
		case "=":
			ok = v == m.Value
		case "!=":
			ok = v != m.Value
		case "=~", "!~":
			ok = regexp.MustCompile("^(?:"+m.Value+")$").MatchString(v) == (m.Op == "=~")
		}
		if !ok {
			return false
		}
	}
	return true
}
