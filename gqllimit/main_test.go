package gqllimit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/gqllimit"
	"github.com/tollgate-go/tollgate/gqllimit/internal/gqltest"
)

func TestMain(m *testing.M) {
	if os.Getenv(fleetRole) != "" {
		os.Exit(runReplica())
	}
	stop := startRedis()
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedURL is the real Redis the tests use: REDIS_URL, else a private
// redis-server that startRedis started (redis-server on PATH), else the
// local default.
var sharedURL = "redis://127.0.0.1:6379/0"

func redisURL() string { return sharedURL }

// startRedis sets sharedURL: REDIS_URL when set, else it starts a private
// redis-server (no persistence, a free port) when one is on PATH, and
// returns what stops it.
func startRedis() (stop func()) {
	if u := os.Getenv("REDIS_URL"); u != "" {
		sharedURL = u
		return func() {}
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return func() {}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return func() {}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return func() {}
	}
	u := "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			sharedURL = u
			break
		}
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// newClient connects to the real Redis, or skips (fails under CI=true)
// when there is none. The keys under prefix must all carry a TTL when the
// test ends; they are deleted then.
func newClient(t *testing.T, prefix string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Redis at %s: %v", redisURL(), err)
		}
		t.Skipf("no Redis at %s (set REDIS_URL): %v", redisURL(), err)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := c.Keys(ctx, prefix+":*").Result()
		if err != nil {
			t.Errorf("scan %s: %v", prefix, err)
			return
		}
		for _, k := range keys {
			if ttl := c.PTTL(ctx, k).Val(); ttl < 0 {
				t.Errorf("key %s has no TTL", k)
			}
		}
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return c
}

func newPrefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "test-gql-" + hex.EncodeToString(b[:])
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
