package gqllimit

import (
	"fmt"
	"strings"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// DefaultClass is the class an operation is charged to unless WithClass
// says otherwise.
const DefaultClass = "graphql"

// Defaults of the cost model (Shopify's Admin API defaults).
const (
	// DefaultObjectCost is the cost of a field whose type is an object,
	// an interface or a union, per object.
	DefaultObjectCost = 1
	// DefaultMutationCost is the cost of each top-level field of a
	// mutation, in place of its type's cost.
	DefaultMutationCost = 10
	// DefaultListSize is what a list is assumed to return when no list
	// size argument bounds it.
	DefaultListSize = 10
)

// Option configures an Extension. One given a value it cannot use makes New
// panic with a message naming it.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	class               string
	objectCost          int64
	mutationCost        int64
	listSize            int64
	sizeArgs            []string
	typeCosts           map[string]int64
	fieldCosts          map[string]int64
	exemptIntrospection bool
	readBack            bool
}

func defaultConfig() config {
	return config{
		class:        DefaultClass,
		objectCost:   DefaultObjectCost,
		mutationCost: DefaultMutationCost,
		listSize:     DefaultListSize,
		sizeArgs:     []string{"first", "last"},
		typeCosts:    map[string]int64{},
		fieldCosts:   map[string]int64{},
	}
}

func bad(option, format string, args ...any) error {
	return fmt.Errorf("%w: gqllimit.%s: %s", core.ErrInvalidConfig, option, fmt.Sprintf(format, args...))
}

func checkCost(option string, n int64) error {
	if n < 0 || n > quota.MaxCost {
		return bad(option, "cost must be 0 to %d, got %d", int64(quota.MaxCost), n)
	}
	return nil
}

// WithClass sets the class whose buckets operations are charged to; the
// tenant's tier must configure it. Default DefaultClass ("graphql").
func WithClass(name string) Option {
	return optionFunc(func(c *config) error {
		if err := quota.ValidateName(name); err != nil {
			return bad("WithClass", "%v", err)
		}
		c.class = name
		return nil
	})
}

// WithObjectCost sets the cost of a field whose type is an object, an
// interface or a union, per object. Default DefaultObjectCost (1).
func WithObjectCost(n int64) Option {
	return costOption("WithObjectCost", n, func(c *config) *int64 { return &c.objectCost })
}

// WithMutationCost sets the cost of each top-level field of a mutation, in
// place of its type's cost (its selections are added as for a query).
// Default DefaultMutationCost (10).
func WithMutationCost(n int64) Option {
	return costOption("WithMutationCost", n, func(c *config) *int64 { return &c.mutationCost })
}

// costOption returns the option that sets the cost *field(c) to n, a cost
// checkCost accepts.
func costOption(option string, n int64, field func(*config) *int64) Option {
	return optionFunc(func(c *config) error {
		if err := checkCost(option, n); err != nil {
			return err
		}
		*field(c) = n
		return nil
	})
}

// WithTypeCost sets the cost of every field whose type is typeName, per
// value, in place of its kind's default: WithTypeCost("Money", 1) prices a
// scalar, WithTypeCost("PageInfo", 0) makes an object free. The type must
// exist in the schema (checked when the extension is added to a server).
func WithTypeCost(typeName string, n int64) Option {
	return optionFunc(func(c *config) error {
		if strings.TrimSpace(typeName) == "" || strings.Contains(typeName, ".") {
			return bad("WithTypeCost", "type name %q", typeName)
		}
		if err := checkCost("WithTypeCost", n); err != nil {
			return err
		}
		c.typeCosts[typeName] = n
		return nil
	})
}

// WithFieldCost sets the cost of one field, named "Type.field"
// ("Query.search", "User.avatar"), per value, in place of its type's cost.
// Type is the type the query selects the field on: an interface's field
// selected on the interface is named by the interface.
// It wins over WithTypeCost and, on a mutation's top-level field, over
// WithMutationCost. The field must exist in the schema (checked when the
// extension is added to a server).
func WithFieldCost(field string, n int64) Option {
	return optionFunc(func(c *config) error {
		typ, name, ok := strings.Cut(field, ".")
		if !ok || typ == "" || name == "" || strings.Contains(name, ".") {
			return bad("WithFieldCost", "field %q is not of the form Type.field", field)
		}
		if err := checkCost("WithFieldCost", n); err != nil {
			return err
		}
		c.fieldCosts[field] = n
		return nil
	})
}

// WithListSize sets the size of a list no argument bounds, and the names
// of the arguments that bound a list's length (the largest one given is
// the list's size), replacing the default names; with none, no argument
// bounds a list and every list is priced at size. Default DefaultListSize
// (10), "first" and "last". size must be 1 to 1000000; names must not be
// empty.
func WithListSize(size int64, args ...string) Option {
	return optionFunc(func(c *config) error {
		if size < 1 || size > 1_000_000 {
			return bad("WithListSize", "size must be 1 to 1000000, got %d", size)
		}
		for _, a := range args {
			if strings.TrimSpace(a) == "" {
				return bad("WithListSize", "empty argument name")
			}
		}
		c.listSize = size
		c.sizeArgs = append([]string(nil), args...)
		return nil
	})
}

// WithIntrospectionExempt makes introspection free: __schema and __type
// fields cost nothing, and an operation that selects only those (and
// __typename) is not checked at all. Default: introspection is priced as
// any other selection.
func WithIntrospectionExempt() Option {
	return enable(func(c *config) *bool { return &c.exemptIntrospection })
}

// WithBalanceRead makes extensions.cost read the bucket back from the store
// after the settle (a check of cost 0: one more store call per operation,
// counted as a decision), so that currentlyAvailable includes what other
// operations of the tenant, on any replica, did meanwhile; the rate-limit
// headers Handler writes are then that read's too. Default: the
// balance the admission left, refilled for the operation's run time and
// refunded (capped at capacity) as the settle does, computed without a
// call; exact for one operation at a time.
func WithBalanceRead() Option {
	return enable(func(c *config) *bool { return &c.readBack })
}

// enable returns the option that turns on the switch *field(c).
func enable(field func(*config) *bool) Option {
	return optionFunc(func(c *config) error {
		*field(c) = true
		return nil
	})
}
