package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/httplimit"
)

// TestHold: through a real HTTP server, a request over its rate is held by
// the gate and served (200, the Tollgate-Held-Ms header), not answered
// 429; a client that leaves while held never reaches the handler and its
// tokens come back.
func TestHold(t *testing.T) {
	const maxWait = 5 * time.Second
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"default": {Capacity: 1, RefillPerSecond: 5},
		"slow":    {Capacity: 1, RefillPerSecond: 0.05},
	}}}}
	lim := testkit.NewLimiter(t, redistest.Client(t), tiers)
	g := testkit.NewUnitGate(t, lim, gate.WithHold("default", maxWait), gate.WithHold("slow", time.Minute),
		gate.WithRoutes(gate.Routes{"/slow": {Class: "slow", Cost: 1}}))
	var handled atomic.Int64
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) { handled.Add(1) }
	mux.HandleFunc("/fast", ok)
	mux.HandleFunc("/slow", ok)
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, withTenant(r, r.Header.Get("X-Test-Tenant")))
		})
	}
	srv := httptest.NewServer(auth(httplimit.Middleware(g)(mux)))
	defer srv.Close()
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Test-Tenant", "acme")
		resp, err := srv.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return resp, err
	}

	t.Run("held and served", func(t *testing.T) {
		for i := range 2 {
			resp, err := get(context.Background(), "/fast")
			if err != nil {
				t.Fatal(err)
			}
			held := resp.Header.Get(gate.HeldHeader)
			if resp.StatusCode != http.StatusOK || (i == 0) != (held == "") {
				t.Fatalf("request %d: status %d, %s %q", i, resp.StatusCode, gate.HeldHeader, held)
			}
			if i == 1 {
				ms, err := strconv.ParseInt(held, 10, 64)
				if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > maxWait+time.Millisecond {
					t.Fatalf("%s %q, want 1 to %d ms", gate.HeldHeader, held, maxWait.Milliseconds())
				}
			}
		}
		if handled.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", handled.Load())
		}
	})

	t.Run("client leaves", func(t *testing.T) {
		handled.Store(0)
		if resp, err := get(context.Background(), "/slow"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("first: %v %v", resp, err)
		}
		peek := func() float64 {
			d, err := lim.Peek(context.Background(), quota.Tenant{ID: "acme", Tier: "free"}, "slow")
			if err != nil {
				t.Fatal(err)
			}
			return d.Tokens
		}
		before := peek()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := get(ctx, "/slow"); done <- err }()
		deadline := time.Now().Add(10 * time.Second)
		for g.Holding() == 0 {
			if time.Now().After(deadline) {
				cancel()
				t.Fatal("the request was never held")
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("client: %v, want its cancellation", err)
		}
		for g.Holding() != 0 { // the server notices the client left
			if time.Now().After(deadline) {
				t.Fatal("the hold outlived its client")
			}
			time.Sleep(time.Millisecond)
		}
		if handled.Load() != 1 {
			t.Fatalf("handler ran %d times, want once (the request before)", handled.Load())
		}
		if after := peek(); after < before {
			t.Fatalf("balance %v after the client left, %v before: its tokens were not given back", after, before)
		}
	})
}
