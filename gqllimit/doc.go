// Package gqllimit is a gqlgen extension that gives each tenant a budget of
// GraphQL query cost points, Shopify's Admin API model over tollgate's
// shared buckets: an operation's requested cost, an upper bound computed
// from the query before it runs, is reserved on the tenant's bucket of one
// class; after it ran, the reservation is settled to the actual cost,
// computed from what the resolvers returned (a list asked for 100 items
// that returned 3 is charged for 3). Every response carries
// extensions.cost:
//
//	{"requestedQueryCost": 101, "actualQueryCost": 7,
//	 "throttleStatus": {"maximumAvailable": 1000, "currentlyAvailable": 993, "restoreRate": 50}}
//
// An operation that is not admitted runs no resolver and is answered with
// one GraphQL error whose extensions.code is stable: CodeThrottled (with
// extensions.retryAfterSeconds), CodeMaxCostExceeded when its requested
// cost is above the bucket's capacity (never admitted, no retry hint),
// CodeUnauthenticated, CodeUnavailable, CodeInternal, CodeBadRequest.
// Wrapped in [Extension.Handler], the HTTP response also carries the
// rate-limit headers and, for an operation that did not run, 429 (or the
// gate's other statuses) instead of 200.
//
// # The cost model
//
// A field costs, per value it returns: DefaultObjectCost (1) when its type
// is an object, an interface or a union, 0 for a scalar or an enum, and
// DefaultMutationCost (10) for a top-level field of a mutation;
// [WithTypeCost] and [WithFieldCost] override these. A list multiplies the
// cost of one element (itself and its selections) by its size: the largest
// list size argument given ("first" or "last", [WithListSize]), or, for a
// list none bounds, DefaultListSize (10). A field that takes a size
// argument and is not a list is a connection: its size bounds the lists it
// holds (edges, nodes). Fragments on the concrete types of an abstract
// field count the dearest type's. Every operation costs at least 1.
//
// The actual cost applies the same prices to what was resolved: each
// resolved field's price times the number of values it returned.
//
// # Wiring
//
// The tenant comes from the context (gate.ContextWithTenant, set by the
// authentication middleware before the GraphQL handler); the check, the
// quota, the failure policy and the headers are the gate's, which must be
// built with gate.WithCostReports:
//
//	srv := handler.New(generated.NewExecutableSchema(cfg))
//	srv.AddTransport(transport.POST{})
//	ext := gqllimit.New(svc.Gate) // charged to class "graphql"
//	srv.Use(ext)
//	http.Handle("/graphql", auth(ext.Handler(srv)))
//
// Subscriptions are charged their requested cost when they start and are
// not settled; their events carry that cost. An operation with @defer is
// settled after its last payload.
package gqllimit
