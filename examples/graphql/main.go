// Command graphql is the example service's API as GraphQL (gqlgen) behind
// the examples' JWT authentication, with tollgate's gqllimit extension:
// each operation's requested cost is reserved on the tenant's "graphql"
// bucket before it runs and settled to its actual cost after, and every
// response carries extensions.cost.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./graphql
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" \
//	  -d '{"query":"{ reports(first: 100) { edges { node { name } } } }"}' localhost:8090/graphql
//
// It listens on ADDR (default 127.0.0.1:8090) and reads the environment
// the other examples read (../README.md). The schema's generated code is
// in ./graph (regenerate it there with
// go run github.com/99designs/gqlgen@v0.17.98 generate).
package main

import (
	"encoding/json"
	"net/http"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/tollgate-go/tollgate/examples/graphql/graph"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/gqllimit"
)

func main() {
	app.MainHTTP("graphql", NewHandler)
}

// PathGraphQL is where the GraphQL endpoint is served (POST).
const PathGraphQL = "/graphql"

// NewHandler returns the service: /healthz and /metrics open, /graphql
// behind authentication and then the cost limit.
func NewHandler(a *app.App) (http.Handler, error) {
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{}}))
	srv.AddTransport(transport.POST{})
	srv.Use(extension.Introspection{})
	// a.Gate is built with gate.WithCostReports, which the settle needs
	limit := gqllimit.New(a.Gate, gqllimit.WithIntrospectionExempt())
	srv.Use(limit)

	mux := http.NewServeMux()
	mux.Handle("GET "+app.PathHealth, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(app.Health{Status: "ok"})
	}))
	mux.Handle("GET "+app.PathMetrics, a.Metrics)
	mux.Handle("POST "+PathGraphQL, a.Auth.RequireTenant(limit.Handler(srv)))
	return mux, nil
}
