package httplimit_test

import (
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/httplimit"
)

// authenticate stands for your authentication middleware: it verifies the
// credential and stores the tenant in the request context. The limiter
// never reads the tenant from a header.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := verify(r.Header.Get("Authorization"))
		if ok {
			r = r.WithContext(gate.ContextWithTenant(r.Context(), tenant))
		}
		next.ServeHTTP(w, r)
	})
}

func verify(string) (quota.Tenant, bool) { return quota.Tenant{ID: "t42", Tier: "free"}, true }

func Example() {
	resolver, _ := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default": {Capacity: 20, RefillPerSecond: 2},
			"export":  {Capacity: 10, RefillPerSecond: 0.1},
		}},
	}})
	lim, _ := core.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), resolver)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/profile", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/reports/export", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})

	// the gate is built, and its configuration checked, once
	g, err := gate.New(lim, gate.WithRoutes(gate.Routes{
		"POST /v1/reports/export": {Class: "export", Cost: 5},
		"/healthz":                {Exempt: true},
	}))
	if err != nil {
		panic(err)
	}
	limit := httplimit.Middleware(g)
	_ = http.ListenAndServe(":8080", authenticate(limit(mux)))
}
