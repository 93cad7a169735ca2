package gqllimit

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/tollgate-go/tollgate/core/quota"
)

// model is the cost model over one schema: what a field costs per value.
type model struct {
	cfg    config
	schema *ast.Schema
}

// isIntrospection reports whether a field is an introspection entry point.
func isIntrospection(name string) bool { return name == "__schema" || name == "__type" }

// perValue is what one value of field def, of parent type parent, costs by
// itself (its selections aside). mutationRoot says it is a top-level field
// of a mutation.
func (m *model) perValue(parent string, def *ast.FieldDefinition, mutationRoot bool) int64 {
	if n, ok := m.cfg.fieldCosts[parent+"."+def.Name]; ok {
		return n
	}
	if mutationRoot {
		return m.cfg.mutationCost
	}
	named := def.Type.Name()
	if n, ok := m.cfg.typeCosts[named]; ok {
		return n
	}
	if t := m.schema.Types[named]; t != nil {
		switch t.Kind {
		case ast.Object, ast.Interface, ast.Union:
			return m.cfg.objectCost
		}
	}
	return 0
}

// sizeArg returns the largest list size argument field was given (its
// default included), and whether it declares one at all.
func (m *model) sizeArg(f *ast.Field, vars map[string]any) (size int64, given, declared bool) {
	var args map[string]any
	for _, name := range m.cfg.sizeArgs {
		if f.Definition.Arguments.ForName(name) == nil {
			continue
		}
		declared = true
		if args == nil {
			args = f.ArgumentMap(vars)
		}
		if n, ok := toInt(args[name]); ok {
			if !given || n > size {
				size = n
			}
			given = true
		}
	}
	return max(size, 0), given, declared
}

// toInt reads an argument value as an integer.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n >= 0 && n <= math.MaxInt64/2 {
			return int64(math.Ceil(n)), true
		}
		return 0, n < 0
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		if f, err := n.Float64(); err == nil {
			return toInt(f)
		}
	case string:
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			return i, true
		}
	}
	return 0, false
}

// add and mul saturate at quota.MaxCost + 1: a cost above quota.MaxCost is
// never admitted, however far above.
func add(a, b int64) int64 { return min(a+b, quota.MaxCost+1) }

func mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > (quota.MaxCost+1)/b {
		return quota.MaxCost + 1
	}
	return min(a*b, quota.MaxCost+1)
}

// requested is the cost of op before execution: an upper bound when every
// list returns at most its size argument.
func (m *model) requested(op *ast.OperationDefinition, vars map[string]any) int64 {
	var root *ast.Definition
	switch op.Operation {
	case ast.Mutation:
		root = m.schema.Mutation
	case ast.Subscription:
		root = m.schema.Subscription
	default:
		root = m.schema.Query
	}
	return m.selections(op.SelectionSet, root, vars, 0, op.Operation == ast.Mutation)
}

// onlyIntrospection reports whether op selects nothing but introspection
// fields and __typename.
func onlyIntrospection(sel ast.SelectionSet) bool {
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if s.Name != "__typename" && !isIntrospection(s.Name) {
				return false
			}
		case *ast.InlineFragment:
			if !onlyIntrospection(s.SelectionSet) {
				return false
			}
		case *ast.FragmentSpread:
			if s.Definition == nil || !onlyIntrospection(s.Definition.SelectionSet) {
				return false
			}
		}
	}
	return true
}

// selections is the cost of one value of type parent with selection set
// sel. inherited is the size a connection field passes to the lists of
// its own selections (0: none). Fragments on the parent's own type (or on
// no type) are added; fragments on other types (the concrete types of an
// abstract parent) are grouped by type and the dearest group is added, as
// a value has one type.
func (m *model) selections(sel ast.SelectionSet, parent *ast.Definition, vars map[string]any, inherited int64, mutationRoot bool) int64 {
	if parent == nil {
		return 0
	}
	var total int64
	byType := map[string]int64{}
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if !included(s.Directives, vars) {
				continue
			}
			total = add(total, m.field(s, parent, vars, inherited, mutationRoot))
		case *ast.InlineFragment:
			if !included(s.Directives, vars) {
				continue
			}
			c := m.selections(s.SelectionSet, parent, vars, inherited, mutationRoot)
			if s.TypeCondition == "" || s.TypeCondition == parent.Name {
				total = add(total, c)
			} else {
				byType[s.TypeCondition] = add(byType[s.TypeCondition], c)
			}
		case *ast.FragmentSpread:
			if !included(s.Directives, vars) || s.Definition == nil {
				continue
			}
			c := m.selections(s.Definition.SelectionSet, parent, vars, inherited, mutationRoot)
			if tc := s.Definition.TypeCondition; tc == "" || tc == parent.Name {
				total = add(total, c)
			} else {
				byType[tc] = add(byType[tc], c)
			}
		}
	}
	var dearest int64
	for _, c := range byType {
		dearest = max(dearest, c)
	}
	return add(total, dearest)
}

// field is the requested cost of one field of a value of type parent.
func (m *model) field(f *ast.Field, parent *ast.Definition, vars map[string]any, inherited int64, mutationRoot bool) int64 {
	def := f.Definition
	if def == nil || f.Name == "__typename" || (m.cfg.exemptIntrospection && isIntrospection(f.Name)) {
		return 0
	}
	per := m.perValue(selectedOn(f, parent.Name), def, mutationRoot)
	size, given, declared := m.sizeArg(f, vars)
	if !given {
		size = m.cfg.listSize
	}
	isList := def.Type.Elem != nil
	pass := int64(0)
	if !isList && declared {
		// a connection: its size bounds the lists it holds (edges, nodes)
		pass = size
	}
	children := m.selections(f.SelectionSet, m.schema.Types[def.Type.Name()], vars, pass, false)
	if !isList {
		return add(per, children)
	}
	n := size
	if !declared && inherited > 0 {
		n = inherited
	}
	return mul(n, add(per, children))
}

// included evaluates @skip and @include; a value it cannot read counts
// the selection in.
func included(ds ast.DirectiveList, vars map[string]any) bool {
	for _, d := range ds {
		if d.Name != "skip" && d.Name != "include" {
			continue
		}
		arg := d.Arguments.ForName("if")
		if arg == nil {
			continue
		}
		v, err := arg.Value.Value(vars)
		b, ok := v.(bool)
		if err != nil || !ok {
			continue
		}
		if (d.Name == "skip") == b {
			return false
		}
	}
	return true
}

// valueCount is how many values a resolved field returned: for a list,
// its length; else 1 for a non-null value, 0 for null.
func valueCount(v any, list bool) int64 {
	if v == nil {
		return 0
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return 0
		}
		if !list {
			return 1
		}
		rv = rv.Elem()
	}
	if !list {
		if (rv.Kind() == reflect.Map || rv.Kind() == reflect.Slice || rv.Kind() == reflect.Func || rv.Kind() == reflect.Chan) && rv.IsNil() {
			return 0
		}
		return 1
	}
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return int64(rv.Len())
	}
	return 1
}

// validate checks the overrides against the schema.
func (m *model) validate() error {
	for name := range m.cfg.typeCosts {
		if m.schema.Types[name] == nil {
			return fmt.Errorf("gqllimit.WithTypeCost: the schema has no type %q", name)
		}
	}
	for name := range m.cfg.fieldCosts {
		typ, field, _ := strings.Cut(name, ".")
		t := m.schema.Types[typ]
		if t == nil || t.Fields.ForName(field) == nil {
			return fmt.Errorf("gqllimit.WithFieldCost: the schema has no field %q", name)
		}
	}
	return nil
}

// selectedOn is the type a field was selected on, as the query names it
// (an interface, or a fragment's type condition): the type a WithFieldCost
// name gives.
func selectedOn(f *ast.Field, parent string) string {
	if f.ObjectDefinition != nil {
		return f.ObjectDefinition.Name
	}
	return parent
}
