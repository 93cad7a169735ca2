// Package gqltest is a small gqlgen schema the extension's tests serve:
// a connection, bounded and unbounded lists and a mutation, over a fixed
// number of rows, with resolvers that count their calls.
//
// generated.go and models.go are gqlgen's output; regenerate them in this
// folder with
//
//	go run github.com/99designs/gqlgen@v0.17.98 generate
package gqltest

import (
	"context"
	"strconv"
	"sync/atomic"
)

// Resolver serves Rows rows to every list, fewer when an argument asks
// for fewer. Calls counts every resolver call; Hook, when set, runs in
// the users resolver before it answers.
type Resolver struct {
	Rows  int
	Calls atomic.Int64
	Hook  func(ctx context.Context)
}

func (r *Resolver) rows(first, last *int) int {
	n := r.Rows
	if first != nil {
		n = min(n, *first)
	}
	if last != nil {
		n = min(n, *last)
	}
	return max(n, 0)
}

func (r *Resolver) users(n int) []*User {
	us := make([]*User, n)
	for i := range us {
		us[i] = &User{ID: strconv.Itoa(i), Name: "user " + strconv.Itoa(i)}
	}
	return us
}

// Touch is the resolver for the touch field.
func (r *mutationResolver) Touch(ctx context.Context, id string) (*Item, error) {
	r.Calls.Add(1)
	return &Item{ID: id, Name: "touched"}, nil
}

// Users is the resolver for the users field.
func (r *queryResolver) Users(ctx context.Context, first *int, last *int) (*UserConnection, error) {
	r.Calls.Add(1)
	if r.Hook != nil {
		r.Hook(ctx)
	}
	c := &UserConnection{PageInfo: &PageInfo{}}
	for i, u := range r.users(r.rows(first, last)) {
		c.Edges = append(c.Edges, &UserEdge{Cursor: strconv.Itoa(i), Node: u})
	}
	c.PageInfo.HasNextPage = len(c.Edges) < r.Rows
	return c, nil
}

// Items is the resolver for the items field.
func (r *queryResolver) Items(ctx context.Context, first *int) ([]*Item, error) {
	r.Calls.Add(1)
	items := make([]*Item, r.rows(first, nil))
	for i := range items {
		items[i] = &Item{ID: strconv.Itoa(i), Name: "item " + strconv.Itoa(i)}
	}
	return items, nil
}

// Tags is the resolver for the tags field.
func (r *queryResolver) Tags(ctx context.Context) ([]string, error) {
	r.Calls.Add(1)
	tags := make([]string, r.Rows)
	for i := range tags {
		tags[i] = "tag" + strconv.Itoa(i)
	}
	return tags, nil
}

// Item is the resolver for the item field.
func (r *queryResolver) Item(ctx context.Context, id string) (*Item, error) {
	r.Calls.Add(1)
	if id == "" {
		return nil, nil
	}
	return &Item{ID: id, Name: "item " + id}, nil
}

// Friends is the resolver for the friends field.
func (r *userResolver) Friends(ctx context.Context, obj *User, first *int) ([]*User, error) {
	r.Calls.Add(1)
	return r.users(r.rows(first, nil)), nil
}

// Mutation returns MutationResolver implementation.
func (r *Resolver) Mutation() MutationResolver { return &mutationResolver{r} }

// Query returns QueryResolver implementation.
func (r *Resolver) Query() QueryResolver { return &queryResolver{r} }

// User returns UserResolver implementation.
func (r *Resolver) User() UserResolver { return &userResolver{r} }

type (
	mutationResolver struct{ *Resolver }
	queryResolver    struct{ *Resolver }
	userResolver     struct{ *Resolver }
)
