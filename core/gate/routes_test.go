package gate_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/core/gate"
)

func TestRoutesLookup(t *testing.T) {
	rs := gate.Routes{
		"GET /v1/items/:id":          {Class: "read", Cost: 1},
		"/v1/items/:id":              {Class: "write", Cost: 2},
		"/healthz":                   {Exempt: true},
		"/acme.v1.Reports/Export":    {Class: "export", Cost: 5},
		"/acme.v1.Reports/*":         {Class: "reports", Cost: 1},
		"/files/*":                   {Class: "files", Cost: 1},
		"POST /acme.v1.Reports/List": {Class: "post", Cost: 3},
		"GET /v1/profile":            {Class: "profile", Cost: 5},
		"GET /v1/feed":               {Class: "feed", Cost: 2},
		"HEAD /v1/feed":              {Class: "feed", Cost: 1},
	}
	for _, c := range []struct {
		name, method, pattern string
		want                  gate.Route
		ok                    bool
	}{
		{"method and pattern", "GET", "/v1/items/:id", rs["GET /v1/items/:id"], true},
		{"any method", "DELETE", "/v1/items/:id", rs["/v1/items/:id"], true},
		{"exempt", "GET", "/healthz", gate.Route{Exempt: true}, true},
		{"unknown route", "GET", "/v2/items/:id", gate.Route{}, false},
		{"gRPC exact beats the wildcard", "", "/acme.v1.Reports/Export", rs["/acme.v1.Reports/Export"], true},
		{"gRPC service wildcard", "", "/acme.v1.Reports/List", rs["/acme.v1.Reports/*"], true},
		{"wildcard is per service", "", "/acme.v1.Billing/List", gate.Route{}, false},
		{"wildcard needs a method name", "", "/acme.v1.Reports/", gate.Route{}, false},
		{"wildcard does not match nested paths", "", "/acme.v1.Reports/a/b", gate.Route{}, false},
		{"HTTP endpoints never match the wildcard", "GET", "/files/a", gate.Route{}, false},
		{"HTTP endpoints match the literal pattern", "GET", "/files/*", rs["/files/*"], true},
		{"a method key is HTTP only", "", "/acme.v1.Reports/List", rs["/acme.v1.Reports/*"], true},
		{"HTTP method key", "POST", "/acme.v1.Reports/List", rs["POST /acme.v1.Reports/List"], true},
		{"HEAD is charged as GET", "HEAD", "/v1/profile", rs["GET /v1/profile"], true},
		{"a HEAD key beats GET", "HEAD", "/v1/feed", rs["HEAD /v1/feed"], true},
		{"HEAD before the any-method key", "HEAD", "/v1/items/:id", rs["GET /v1/items/:id"], true},
		{"only HEAD borrows GET", "POST", "/v1/profile", gate.Route{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := rs.Lookup(c.method, c.pattern)
			if got != c.want || ok != c.ok {
				t.Errorf("Lookup(%q, %q) = %+v, %v; want %+v, %v", c.method, c.pattern, got, ok, c.want, c.ok)
			}
		})
	}
}

// TestVerdictDoneNoSlot: a Verdict that holds no slot and no reservation
// (an exempt route, a denial) may be done, twice.
func TestVerdictDoneNoSlot(t *testing.T) {
	var v gate.Verdict
	v.Done()
	v.Done()
}
