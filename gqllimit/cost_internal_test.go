package gqllimit

import (
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"

	"github.com/tollgate-go/tollgate/gqllimit/internal/gqltest"
)

func testModel(t *testing.T, opts ...Option) *model {
	t.Helper()
	e := New(gateForTest(t), opts...)
	if err := e.Validate(gqltest.NewExecutableSchema(gqltest.Config{Resolvers: &gqltest.Resolver{}})); err != nil {
		t.Fatal(err)
	}
	return e.costModel()
}

func requestedOf(t *testing.T, m *model, q string, vars map[string]any) int64 {
	t.Helper()
	doc, err := gqlparser.LoadQueryWithRules(m.schema, q, nil)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return m.requested(doc.Operations[0], vars)
}

// The cost model: objects 1, scalars 0, lists times their size argument
// (or the default size), a connection's size passed to its edges, a
// mutation's top-level field 10, overrides winning over kinds.
func TestRequestedCost(t *testing.T) {
	m := testModel(t)
	for _, c := range []struct {
		q    string
		vars map[string]any
		want int64
	}{
		{`{ item(id: "1") { id name } }`, nil, 1},
		{`{ items(first: 7) { id } }`, nil, 7},
		{`{ items { id } }`, nil, DefaultListSize},
		{`{ tags }`, nil, 0},
		{`query($n: Int) { items(first: $n) { id } }`, map[string]any{"n": int64(4)}, 4},
		{`{ users(first: 5) { edges { node { id } } pageInfo { hasNextPage } } }`, nil, 1 + 5*2 + 1},
		{`{ users(first: 5, last: 9) { edges { node { id } } } }`, nil, 1 + 9*2},
		{`{ users(first: 2) { edges { node { friends(first: 3) { id } } } } }`, nil, 1 + 2*(1+1+3)},
		{`{ users(first: 2) { edges { node { ...F } } } } fragment F on User { friends(first: 3) { id } }`, nil, 1 + 2*(1+1+3)},
		{`query($s: Boolean!) { item(id: "1") { id } items(first: 5) @skip(if: $s) { id } }`, map[string]any{"s": true}, 1},
		{`mutation { touch(id: "1") { id } }`, nil, DefaultMutationCost},
		{`{ a: item(id: "1") { id } b: item(id: "2") { id } }`, nil, 2},
	} {
		if got := requestedOf(t, m, c.q, c.vars); got != c.want {
			t.Errorf("%s: requested %d, want %d", c.q, got, c.want)
		}
	}
	o := testModel(t, WithFieldCost("Query.tags", 2), WithTypeCost("PageInfo", 0), WithObjectCost(3), WithListSize(4, "first"))
	if got := requestedOf(t, o, `{ tags users(last: 100) { edges { node { id } } pageInfo { hasNextPage } } }`, nil); got != 4*2+3+4*(3+3) {
		t.Errorf("overrides: requested %d, want %d", got, 4*2+3+4*(3+3))
	}
}

// Bad option values and a nil gate panic, naming what is wrong; overrides
// naming what the schema lacks fail Validate.
func TestNewPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		new  func()
		want string
	}{
		{"nil gate", func() { New(nil) }, "nil gate"},
		{"negative cost", func() { New(gateForTest(t), WithObjectCost(-1)) }, "WithObjectCost"},
		{"bad field", func() { New(gateForTest(t), WithFieldCost("nofield", 1)) }, "WithFieldCost"},
		{"list size", func() { New(gateForTest(t), WithListSize(0)) }, "WithListSize"},
		{"class", func() { New(gateForTest(t), WithClass("")) }, "WithClass"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, c.want) {
					t.Fatalf("panic %v, want one naming %q", r, c.want)
				}
			}()
			c.new()
		})
	}
	e := New(gateForTest(t), WithFieldCost("Query.nothing", 1))
	if err := e.Validate(gqltest.NewExecutableSchema(gqltest.Config{})); err == nil {
		t.Fatal("Validate accepted an override of a field the schema lacks")
	}
}
