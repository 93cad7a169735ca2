package gqllimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/gqllimit"
	"github.com/tollgate-go/tollgate/gqllimit/internal/gqltest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(fleetRole) != "" {
		os.Exit(runReplica())
	}
	os.Exit(redistest.RunChecked(m))
}

// stack is one service: a limiter over the real Redis, a gate, the
// extension and a gqlgen server over the test schema.
type stack struct {
	lim      *core.Limiter
	res      *gqltest.Resolver
	handler  http.Handler
	tenant   quota.Tenant
	capacity int64
}

type stackOpts struct {
	quota    quota.Quota
	rows     int
	prefix   string
	noReport bool // a gate without WithCostReports
	ext      []gqllimit.Option
}

func newStack(t testing.TB, c redis.UniversalClient, o stackOpts) *stack {
	t.Helper()
	s, err := buildStack(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.lim.Close() })
	return s
}

func buildStack(c redis.UniversalClient, o stackOpts) (*stack, error) {
	if o.prefix == "" {
		return nil, errors.New("no prefix")
	}
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(100), gqllimit.DefaultClass: o.quota}},
	}})
	if err != nil {
		return nil, err
	}
	lim, err := core.New(c, res, core.WithPrefix(o.prefix), core.WithTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	var gopts []gate.Option
	if !o.noReport {
		gopts = append(gopts, gate.WithCostReports())
	}
	g, err := gate.New(lim, gopts...)
	if err != nil {
		_ = lim.Close()
		return nil, err
	}
	r := &gqltest.Resolver{Rows: o.rows}
	srv := handler.New(gqltest.NewExecutableSchema(gqltest.Config{Resolvers: r}))
	srv.AddTransport(transport.POST{})
	srv.Use(extension.Introspection{})
	ext := gqllimit.New(g, o.ext...)
	srv.Use(ext)
	tenant := quota.Tenant{ID: "t1", Tier: "free"}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Header.Get("X-Anonymous") == "" {
				req = req.WithContext(gate.ContextWithTenant(req.Context(), tenant))
			}
			next.ServeHTTP(w, req)
		})
	}
	return &stack{lim: lim, res: r, handler: auth(ext.Handler(srv)), tenant: tenant, capacity: o.quota.Capacity}, nil
}

// answer is a decoded GraphQL response.
type answer struct {
	status int
	header http.Header
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost *struct {
			RequestedQueryCost int64  `json:"requestedQueryCost"`
			ActualQueryCost    *int64 `json:"actualQueryCost"`
			ThrottleStatus     *struct {
				MaximumAvailable   int64   `json:"maximumAvailable"`
				CurrentlyAvailable int64   `json:"currentlyAvailable"`
				RestoreRate        float64 `json:"restoreRate"`
			} `json:"throttleStatus"`
		} `json:"cost"`
	} `json:"extensions"`
}

func (a answer) code() string {
	if len(a.Errors) == 0 {
		return ""
	}
	s, _ := a.Errors[0].Extensions["code"].(string)
	return s
}

func (s *stack) query(t testing.TB, q string, vars map[string]any, header ...string) answer {
	t.Helper()
	a, err := s.do(q, vars, header...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (s *stack) do(q string, vars map[string]any, header ...string) (answer, error) {
	body, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		return a, fmt.Errorf("response %q: %w", rec.Body.String(), err)
	}
	a.status, a.header = rec.Code, rec.Header()
	return a, nil
}

// tokens is the bucket's balance in Redis now.
func (s *stack) tokens(t testing.TB) float64 {
	t.Helper()
	d, err := s.lim.Peek(context.Background(), s.tenant, gqllimit.DefaultClass)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tokens
}
