package gqllimit_test

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/gqllimit"
)

// slow is a quota whose refill is negligible over a test: the bucket's
// balance is what the charges left.
func slow(capacity int64) quota.Quota {
	return quota.Quota{Capacity: capacity, RefillPerSecond: 0.001}
}

const usersQuery = `query($n: Int) { users(first: $n) { edges { cursor node { id name } } pageInfo { hasNextPage } } }`

// usersCost is usersQuery's cost for n edges: the connection and its
// pageInfo (1 each), and per edge the edge and its node (1 each).
func usersCost(n int64) int64 { return 2 + 2*n }

// checkCost checks a response's extensions.cost against the bucket in
// Redis read after it: currentlyAvailable is the balance rounded down,
// give or take the refill between the two reads.
func checkCost(t *testing.T, s *stack, a answer, requested int64, actual *int64) {
	t.Helper()
	c := a.Extensions.Cost
	if c == nil || c.ThrottleStatus == nil {
		t.Fatalf("no extensions.cost with a throttle status in %+v", a)
	}
	if c.RequestedQueryCost != requested {
		t.Errorf("requestedQueryCost %d, want %d", c.RequestedQueryCost, requested)
	}
	switch {
	case actual == nil && c.ActualQueryCost != nil:
		t.Errorf("actualQueryCost %d, want null", *c.ActualQueryCost)
	case actual != nil && (c.ActualQueryCost == nil || *c.ActualQueryCost != *actual):
		t.Errorf("actualQueryCost %s, want %d", fmtCost(c.ActualQueryCost), *actual)
	}
	if c.ThrottleStatus.MaximumAvailable != s.capacity {
		t.Errorf("maximumAvailable %d, want %d", c.ThrottleStatus.MaximumAvailable, s.capacity)
	}
	got, bucket := c.ThrottleStatus.CurrentlyAvailable, s.tokens(t)
	// the refill between the response and the read is under a token at
	// 0.001/s for anything short of 1000 s
	if float64(got) > bucket+1e-9 || bucket >= float64(got)+2 {
		t.Errorf("currentlyAvailable %d, but the bucket holds %.4f", got, bucket)
	}
}

// A query whose lists come back shorter than requested is charged its
// actual cost in the end: the bucket in Redis lost exactly that much, and
// extensions.cost says so after every response.
func TestSettlesToActualCost(t *testing.T) {
	p := redistest.Prefix(t)
	s := newStack(t, redistest.Client(t), stackOpts{quota: slow(1000), rows: 3, prefix: p})
	var spent int64
	for _, n := range []int64{50, 2, 20} {
		a := s.query(t, usersQuery, map[string]any{"n": n})
		if len(a.Errors) > 0 || a.status != http.StatusOK {
			t.Fatalf("first: %d: status %d, errors %+v", n, a.status, a.Errors)
		}
		actual := usersCost(min(n, 3))
		spent += actual
		checkCost(t, s, a, usersCost(n), &actual)
		if b := s.tokens(t); math.Abs(b-float64(1000-spent)) > 0.5 {
			t.Fatalf("after first: %d the bucket holds %.4f, want %d (charged the actual costs)", n, b, 1000-spent)
		}
		if got := a.header.Get("X-RateLimit-Limit"); got != "1000" {
			t.Errorf("X-RateLimit-Limit %q, want 1000", got)
		}
	}
}

// A refund never lifts the bucket above its capacity: the bucket is made
// full again while the query runs, and its refund is capped.
func TestRefundCappedAtCapacity(t *testing.T) {
	p := redistest.Prefix(t)
	s := newStack(t, redistest.Client(t), stackOpts{quota: slow(500), rows: 1, prefix: p, ext: []gqllimit.Option{gqllimit.WithBalanceRead()}})
	s.res.Hook = func(ctx context.Context) {
		if _, err := s.lim.Reset(context.Background(), s.tenant, gqllimit.DefaultClass); err != nil {
			t.Error(err)
		}
	}
	a := s.query(t, usersQuery, map[string]any{"n": 100})
	if len(a.Errors) > 0 {
		t.Fatal(a.Errors)
	}
	actual := usersCost(1)
	checkCost(t, s, a, usersCost(100), &actual)
	if got, want := a.header.Get("X-RateLimit-Remaining"), strconv.FormatInt(a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable, 10); got != want {
		t.Errorf("X-RateLimit-Remaining %q, want the balance read back, %s", got, want)
	}
	if b := s.tokens(t); b > 500 {
		t.Fatalf("the bucket holds %.4f, above its capacity 500", b)
	}
	if b := s.tokens(t); b < 500-float64(actual)-0.5 {
		t.Fatalf("the bucket holds %.4f, want the full 500 less at most the actual %d", b, actual)
	}
}

// A query costing more than the bucket's capacity is refused, as never,
// before any resolver runs, and charges nothing.
func TestAboveCapacityRefusedBeforeResolvers(t *testing.T) {
	p := redistest.Prefix(t)
	s := newStack(t, redistest.Client(t), stackOpts{quota: slow(100), rows: 3, prefix: p})
	a := s.query(t, `{ items(first: 500) { id name } users(first: 1) { edges { node { id } } } }`, nil)
	if a.code() != gqllimit.CodeMaxCostExceeded {
		t.Fatalf("code %q, want %s: %+v", a.code(), gqllimit.CodeMaxCostExceeded, a.Errors)
	}
	if n := s.res.Calls.Load(); n != 0 {
		t.Fatalf("%d resolver calls, want none", n)
	}
	if _, ok := a.Errors[0].Extensions["retryAfterSeconds"]; ok {
		t.Errorf("a retry hint on a never answer: %+v", a.Errors[0].Extensions)
	}
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "" {
		t.Errorf("status %d, Retry-After %q; want 429 without Retry-After", a.status, a.header.Get("Retry-After"))
	}
	if string(a.Data) != "null" && len(a.Data) != 0 {
		t.Errorf("data %s, want null", a.Data)
	}
	checkCost(t, s, a, 500+usersCost(1)-1, nil)
	if b := s.tokens(t); b != 100 {
		t.Fatalf("the bucket holds %.4f, want 100: nothing charged", b)
	}
}

// A throttled query is answered THROTTLED with a retry hint, HTTP 429 and
// Retry-After, before any resolver runs.
func TestThrottled(t *testing.T) {
	p := redistest.Prefix(t)
	s := newStack(t, redistest.Client(t), stackOpts{quota: slow(100), rows: 100, prefix: p})
	if a := s.query(t, usersQuery, map[string]any{"n": 30}); len(a.Errors) > 0 {
		t.Fatal(a.Errors)
	}
	calls := s.res.Calls.Load()
	a := s.query(t, usersQuery, map[string]any{"n": 30})
	if a.code() != gqllimit.CodeThrottled {
		t.Fatalf("code %q, want %s: %+v", a.code(), gqllimit.CodeThrottled, a.Errors)
	}
	if s.res.Calls.Load() != calls {
		t.Fatalf("a resolver ran for a throttled query")
	}
	if r, _ := a.Errors[0].Extensions["retryAfterSeconds"].(float64); r < 1 {
		t.Errorf("retryAfterSeconds %v, want at least 1", a.Errors[0].Extensions["retryAfterSeconds"])
	}
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Errorf("status %d, Retry-After %q; want 429 with Retry-After", a.status, a.header.Get("Retry-After"))
	}
	checkCost(t, s, a, usersCost(30), nil)
}

// A mutation's top-level field costs DefaultMutationCost; introspection is
// priced by default and free by option.
func TestMutationAndIntrospection(t *testing.T) {
	p := redistest.Prefix(t)
	c := redistest.Client(t)
	s := newStack(t, c, stackOpts{quota: slow(1000), rows: 1, prefix: p})
	a := s.query(t, `mutation { touch(id: "7") { id } }`, nil)
	want := int64(gqllimit.DefaultMutationCost)
	checkCost(t, s, a, want, &want)

	a = s.query(t, `{ __schema { queryType { name } } }`, nil)
	if a.Extensions.Cost == nil || a.Extensions.Cost.RequestedQueryCost < 2 {
		t.Fatalf("introspection priced by default: cost %+v", a.Extensions.Cost)
	}

	p2 := redistest.Prefix(t)
	free := newStack(t, redistest.Client(t), stackOpts{quota: slow(1000), rows: 1, prefix: p2, ext: []gqllimit.Option{gqllimit.WithIntrospectionExempt()}})
	a = free.query(t, `{ __schema { types { name fields { name } } } }`, nil)
	if len(a.Errors) > 0 || a.Extensions.Cost != nil {
		t.Fatalf("exempt introspection: errors %+v, cost %+v", a.Errors, a.Extensions.Cost)
	}
	if b := free.tokens(t); b != 1000 {
		t.Fatalf("exempt introspection charged: the bucket holds %.4f", b)
	}
	a = free.query(t, `{ __schema { types { name } } item(id: "1") { id } }`, nil)
	one := int64(1)
	checkCost(t, free, a, 1, &one)
}

// Without a tenant the operation is answered UNAUTHENTICATED (401); with
// a gate that cannot settle, INTERNAL_SERVER_ERROR.
func TestUnauthenticatedAndMisconfigured(t *testing.T) {
	p := redistest.Prefix(t)
	c := redistest.Client(t)
	s := newStack(t, c, stackOpts{quota: slow(1000), rows: 1, prefix: p})
	a := s.query(t, usersQuery, nil, "X-Anonymous", "1")
	if a.code() != gqllimit.CodeUnauthenticated || a.status != http.StatusUnauthorized {
		t.Fatalf("code %q status %d, want %s 401", a.code(), a.status, gqllimit.CodeUnauthenticated)
	}
	p2 := redistest.Prefix(t)
	bad := newStack(t, redistest.Client(t), stackOpts{quota: slow(1000), rows: 1, prefix: p2, noReport: true})
	a = bad.query(t, usersQuery, nil)
	if a.code() != gqllimit.CodeInternal || bad.res.Calls.Load() != 0 {
		t.Fatalf("code %q, %d calls; want %s before any resolver", a.code(), bad.res.Calls.Load(), gqllimit.CodeInternal)
	}
}

func fmtCost(p *int64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatInt(*p, 10)
}

// Overrides price the actual cost as they price the requested one: a
// scalar made dear is charged per value returned.
func TestOverridesSettle(t *testing.T) {
	p := redistest.Prefix(t)
	s := newStack(t, redistest.Client(t), stackOpts{quota: slow(1000), rows: 3, prefix: p,
		ext: []gqllimit.Option{gqllimit.WithFieldCost("User.name", 3), gqllimit.WithTypeCost("PageInfo", 0)}})
	a := s.query(t, usersQuery, map[string]any{"n": 50})
	if len(a.Errors) > 0 {
		t.Fatal(a.Errors)
	}
	// the connection 1, per edge the edge 1, its node 1 and the name 3
	actual := int64(1 + 3*5)
	checkCost(t, s, a, 1+50*5, &actual)
	if b := s.tokens(t); math.Abs(b-float64(1000-actual)) > 0.5 {
		t.Fatalf("the bucket holds %.4f, want %d", b, 1000-actual)
	}
}
