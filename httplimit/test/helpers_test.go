package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
)

func newLimiter(t testing.TB, opts ...core.Option) *core.Limiter {
	t.Helper()
	res, err := core.NewResolver(core.Tiers{Default: "free", Tiers: map[string]core.Tier{"free": {Classes: map[string]core.Quota{
		"default": {Capacity: 2, RefillPerSecond: 0.01},
		"export":  {Capacity: 10, RefillPerSecond: 0.01},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]core.Option{core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5 * time.Second)}, opts...)
	lim, err := core.New(redisClient(t), res, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func withTenant(r *http.Request, id string) *http.Request {
	return r.WithContext(core.ContextWithTenant(r.Context(), core.Tenant{ID: id}))
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func redisClient(t testing.TB) *redis.Client { return redistest.Client(t) }
