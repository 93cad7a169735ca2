package examples_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/ginlimit"
)

// A program that takes its tiers, routes, header style and every
// deployment setting from a tier file and limits a Gin service with them:
// config.Open opens Redis from its URL and builds the resolver, the limiter
// and the gate the file describes, with one Close. httplimit, echolimit,
// fiberlimit and grpclimit take the same gate (see Example_oneGate).
func Example_configFile() {
	svc, err := config.Open(context.Background(), "tollgate.yaml", // the file the example services serve
		config.WithRedisURL(redisURL()), // redis://, rediss://, redis+cluster:// or redis+sentinel://
		// your options come after the file's and win: here a longer bound
		// on a Redis call than the file's 100ms, for a busy test machine
		config.WithLimiterOptions(core.WithTimeout(2*time.Second),
			// and keys of its own, never a service's buckets (rl: by default)
			core.WithPrefix("example")))
	if err != nil {
		fmt.Println(err) // every problem in the file, as file:line: field: message
		return
	}
	defer svc.Close()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// svc.Gate, built once: the file's routes, header style, anonymous tier
	r.Use(authenticate, ginlimit.Middleware(svc.Gate))
	r.GET("/v1/profile", func(c *gin.Context) { c.String(http.StatusOK, "profile") })
	r.POST("/v1/reports/export", func(c *gin.Context) { c.String(http.StatusOK, "exported") })
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	srv := httptest.NewServer(r)
	defer srv.Close()

	// tollgate.yaml: exports are class export (free tier: 10 tokens) at
	// cost 5; the profile is class default; /healthz is exempt.
	tenant := newTenant()
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/profile"},
		{"POST", "/v1/reports/export"},
		{"POST", "/v1/reports/export"},
		{"POST", "/v1/reports/export"},
		{"GET", "/healthz"},
	} {
		hr, _ := http.NewRequest(req.method, srv.URL+req.path, nil)
		hr.Header.Set("Authorization", "Bearer "+tenant)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(req.method, req.path, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// GET /v1/profile 200 20 19
	// POST /v1/reports/export 200 10 5
	// POST /v1/reports/export 200 10 0
	// POST /v1/reports/export 429 10 0
	// GET /healthz 200
}

// authenticate stands for your authentication middleware: it stores the
// verified tenant in the request context (here, a bearer "token" that is
// the tenant ID itself; never do that).
func authenticate(c *gin.Context) {
	var id string
	if _, err := fmt.Sscanf(c.GetHeader("Authorization"), "Bearer %s", &id); err == nil {
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), quota.Tenant{ID: id, Tier: "free"}))
	}
	c.Next()
}

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// newTenant returns a tenant no earlier run has charged.
func newTenant() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "example-" + hex.EncodeToString(b[:])
}
