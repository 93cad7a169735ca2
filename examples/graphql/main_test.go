package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/examples/graphql/graph"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

type response struct {
	Errors []struct {
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost struct {
			RequestedQueryCost int64  `json:"requestedQueryCost"`
			ActualQueryCost    *int64 `json:"actualQueryCost"`
			ThrottleStatus     struct {
				MaximumAvailable   int64 `json:"maximumAvailable"`
				CurrentlyAvailable int64 `json:"currentlyAvailable"`
			} `json:"throttleStatus"`
		} `json:"cost"`
	} `json:"extensions"`
}

func post(t *testing.T, h http.Handler, token, query string) (int, response) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"query": query})
	req := httptest.NewRequest(http.MethodPost, PathGraphQL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var r response
	if rec.Code != http.StatusUnauthorized {
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("%d %q: %v", rec.Code, rec.Body.String(), err)
		}
	}
	return rec.Code, r
}

// A page asked for 100 reports returns 12 and is charged for 12; a query
// above the free tier's 1000 points is refused before it runs; no token,
// no GraphQL.
func TestService(t *testing.T) {
	a := apptest.New(t)
	h, err := NewHandler(a)
	if err != nil {
		t.Fatal(err)
	}
	token := apptest.Token(t, apptest.Tenant(t), "free")
	status, r := post(t, h, token, `{ reports(first: 100) { edges { node { name } } pageInfo { hasNextPage } } }`)
	c := r.Extensions.Cost
	// the connection and pageInfo 1 each, an edge and its node 1 each
	wantActual := int64(2 + 2*graph.ReportCount)
	if status != http.StatusOK || len(r.Errors) > 0 || c.RequestedQueryCost != 2+2*100 || c.ActualQueryCost == nil || *c.ActualQueryCost != wantActual {
		t.Fatalf("status %d, errors %+v, cost %+v", status, r.Errors, c)
	}
	if got := c.ThrottleStatus.CurrentlyAvailable; c.ThrottleStatus.MaximumAvailable != 1000 || got < 1000-wantActual || got > 1000 {
		t.Errorf("throttle status %+v, want 1000 less %d", c.ThrottleStatus, wantActual)
	}
	status, r = post(t, h, token, `{ reports(first: 1000) { edges { node { name } } } }`)
	if status != http.StatusTooManyRequests || len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != "MAX_COST_EXCEEDED" {
		t.Fatalf("above capacity: status %d, errors %+v", status, r.Errors)
	}
	if status, _ = post(t, h, "", `{ viewer { id } }`); status != http.StatusUnauthorized {
		t.Fatalf("no token: status %d, want 401", status)
	}
}
