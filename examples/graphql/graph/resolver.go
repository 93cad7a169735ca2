// Package graph is the example GraphQL service's schema (schema.graphqls)
// and its resolvers. generated.go and models.go are gqlgen's output:
// regenerate them in this folder with
//
//	go run github.com/99designs/gqlgen@v0.17.98 generate
package graph

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/tollgate-go/tollgate/core/gate"
)

// ReportCount is how many reports every tenant has.
const ReportCount = 12

// DefaultPageSize is the page size when a query gives no first argument,
// as the limiter's default list size prices it.
const DefaultPageSize = 10

// Resolver serves every tenant the same ReportCount monthly reports.
type Resolver struct{}

// Mutation returns the mutation resolvers.
func (r *Resolver) Mutation() MutationResolver { return mutationResolver{} }

// Query returns the query resolvers.
func (r *Resolver) Query() QueryResolver { return queryResolver{} }

type (
	mutationResolver struct{}
	queryResolver    struct{}
)

var errNoTenant = errors.New("no tenant")

func (queryResolver) Viewer(ctx context.Context) (*Viewer, error) {
	t, ok := gate.TenantFromContext(ctx)
	if !ok {
		return nil, errNoTenant
	}
	return &Viewer{ID: t.ID, Tier: t.Tier}, nil
}

func (queryResolver) Reports(ctx context.Context, first *int, after *string) (*ReportConnection, error) {
	n := DefaultPageSize
	if first != nil {
		n = *first
	}
	if n < 0 {
		return nil, fmt.Errorf("first must not be negative, got %d", n)
	}
	start := 0
	if after != nil {
		i, err := strconv.Atoi(*after)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("bad cursor %q", *after)
		}
		start = i + 1
	}
	c := &ReportConnection{PageInfo: &PageInfo{}}
	for i := start; i < ReportCount && len(c.Edges) < n; i++ {
		cursor := strconv.Itoa(i)
		c.Edges = append(c.Edges, &ReportEdge{Cursor: cursor, Node: &Report{Name: fmt.Sprintf("2026-%02d.csv", ReportCount-i), Format: "csv"}})
		c.PageInfo.EndCursor = &cursor
	}
	c.PageInfo.HasNextPage = start+len(c.Edges) < ReportCount
	return c, nil
}

func (mutationResolver) ExportReport(ctx context.Context, name string) (*Report, error) {
	if _, ok := gate.TenantFromContext(ctx); !ok {
		return nil, errNoTenant
	}
	return &Report{Name: name, Format: "csv"}, nil
}
