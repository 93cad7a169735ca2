package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-redis/redis_rate/v10"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/ginlimit"
	"github.com/ulule/limiter/v3"
	ulgin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// The quota every limited configuration enforces on the one tier: a burst
// of capacity, refill tokens per second.
//
// ulule/limiter is a fixed window: it is sized so that its long-run rate
// and its largest burst from rest match the bucket's: limit = capacity per
// window of capacity / refill seconds (100 per 5 s = 20/s). Within one
// window it admits at most the bucket's burst; across a window boundary it
// admits up to 2 x limit in a moment, which the accuracy phase shows.
const (
	capacity = 100
	refill   = 20 // tokens per second
	tier     = "standard"
	window   = time.Duration(capacity / refill * int64(time.Second))
)

// The routes of the service: one limited route, and two open ones for the
// driver.
const (
	pathProfile = "/v1/profile"
	pathHealth  = "/healthz"
	pathStats   = "/stats"
)

// secretEnv names the environment variable holding the HS256 secret that
// the driver signs tokens with and the service verifies them with.
const secretEnv = "HTTPBENCH_JWT_SECRET"

// configs are the ways the service runs, in the order reported. one-get
// is the floor of any shared check: exactly one plain Redis GET per request
// through go-redis with its defaults, whatever it returns, and no decision.
// tollgate-leases is tollgate with leases of at most leaseSize tokens for
// -lease-ttl (default 1 s) on the limited class.
var configs = []string{"none", "one-get", "tollgate", "tollgate-leases", "ulule", "redis_rate"}

// limits reports whether the configuration decides (none and one-get
// admit everything).
func limits(config string) bool { return config != "none" && config != "one-get" }

// The lease of tollgate-leases: each replica holds at most leaseSize
// tokens of a tenant outside the store, so admissions across R replicas in
// any interval exceed the bucket's allowance for it by at most
// R x leaseSize, and from a full bucket never exceed capacity + refill x
// elapsed (a leased token is charged before it is spent).
const leaseSize = 10

// extraConfigs may be named in -configs but are not run by default:
// tollgate-nobatch is tollgate with core.WithBatching(false), to tell
// batching's cost from the rest of the middleware's.
var extraConfigs = []string{"tollgate-nobatch"}

// claims are the examples' token claims (examples/internal/app): the
// tenant and its tier, with a required expiry.
type claims struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
	jwt.RegisteredClaims
}

// mint signs a token for tenant on the benchmark's tier, valid for ttl.
func mint(secret []byte, tenant string, ttl time.Duration) (string, error) {
	now := time.Now()
	c := claims{Tenant: tenant, Tier: tier, RegisteredClaims: jwt.RegisteredClaims{
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// authenticate verifies the bearer token as the examples' Verifier does
// (HS256 only, expiry required, 5 s leeway) and stores the tenant with
// gate.ContextWithTenant, or answers 401. The examples' verifier lives in
// an internal package this module cannot import; this is its core, kept
// the same so that every configuration pays the same authentication.
func authenticate(secret []byte) gin.HandlerFunc {
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second),
	)
	key := func(*jwt.Token) (any, error) { return secret, nil }
	return func(c *gin.Context) {
		scheme, token, _ := strings.Cut(c.GetHeader("Authorization"), " ")
		var cl claims
		if !strings.EqualFold(scheme, "Bearer") {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		if _, err := parser.ParseWithClaims(token, &cl, key); err != nil || cl.Tenant == "" || cl.Tier != tier {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.Request = c.Request.WithContext(gate.ContextWithTenant(c.Request.Context(), quota.Tenant{ID: cl.Tenant, Tier: cl.Tier}))
		c.Next()
	}
}

// tenantID is the tenant authenticate stored.
func tenantID(c *gin.Context) string {
	t, _ := gate.TenantFromContext(c.Request.Context())
	return t.ID
}

// counts are the service's answers by status since it started, read by
// the driver at GET /stats: the share of 429s and the admitted requests
// across replicas come from here, not from wrk. gone counts the requests
// whose client had already gone when they were answered (wrk closes its
// connections when a run ends, cancelling the requests in flight): no
// client sees those answers, so they are neither admissions nor errors.
type counts struct {
	ok, limited, other, degraded, gone atomic.Int64
	// errs counts the limiter's errors by message (its first 120 bytes),
	// printed when the service stops: the flood mode's shed causes
	errs sync.Map // string -> *atomic.Int64
}

// onError counts the limiter's errors: tollgate then decides by its
// failure policy (fail open by default, e.g. after its 100 ms timeout);
// the others answer 503. An error because the client went away is not
// the limiter's.
func (n *counts) onError(c *gin.Context, err error) {
	if c.Request.Context().Err() == nil {
		n.degraded.Add(1)
		msg := err.Error()
		msg = msg[:min(len(msg), 120)]
		v, ok := n.errs.Load(msg)
		if !ok {
			v, _ = n.errs.LoadOrStore(msg, new(atomic.Int64))
		}
		v.(*atomic.Int64).Add(1)
	}
}

func (n *counts) middleware(c *gin.Context) {
	c.Next()
	switch st := c.Writer.Status(); {
	case st == http.StatusOK:
		n.ok.Add(1)
	case st == http.StatusTooManyRequests:
		n.limited.Add(1)
	case c.Request.Context().Err() != nil:
		n.gone.Add(1)
	default:
		n.other.Add(1)
	}
}

// limiterMiddleware returns the configuration's limiter as Gin middleware
// (nil for none) and a function that releases it.
func limiterMiddleware(config string, client *redis.Client, n *counts) (gin.HandlerFunc, func(), error) {
	nop := func() {}
	switch config {
	case "none":
		return nil, nop, nil
	case "one-get":
		return oneGet(client, n), nop, nil
	case "tollgate", "tollgate-nobatch", "tollgate-leases":
		resolver, err := quota.NewResolver(quota.Tiers{Default: tier, Tiers: map[string]quota.Tier{
			tier: {Classes: map[string]quota.Quota{"default": {Capacity: capacity, RefillPerSecond: refill}}},
		}})
		if err != nil {
			return nil, nop, err
		}
		var opts []core.Option // defaults
		switch config {
		case "tollgate-nobatch":
			opts = append(opts, core.WithBatching(false))
		case "tollgate-leases":
			opts = append(opts, core.WithLeases("default", leaseSize, *flagLeaseTTL))
		}
		lim, err := core.New(client, resolver, opts...)
		if err != nil {
			return nil, nop, err
		}
		// the error handler only observes: by default there is none
		g, err := gate.New(lim)
		if err != nil {
			_ = lim.Close()
			return nil, nop, err
		}
		return ginlimit.Middleware(g, ginlimit.WithErrorHandler(n.onError)), func() { _ = lim.Close() }, nil
	case "ulule":
		store, err := ulredis.NewStoreWithOptions(client, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			return nil, nop, err
		}
		lim := limiter.New(store, limiter.Rate{Period: window, Limit: capacity})
		return ulgin.NewMiddleware(lim,
			ulgin.WithKeyGetter(tenantID),
			ulgin.WithErrorHandler(func(c *gin.Context, err error) {
				n.onError(c, err)
				c.AbortWithStatus(http.StatusServiceUnavailable)
			}),
		), nop, nil
	case "redis_rate":
		return redisRate(redis_rate.NewLimiter(client), n), nop, nil
	}
	return nil, nop, fmt.Errorf("unknown configuration %q, want one of %s", config, strings.Join(append(configs, extraConfigs...), ", "))
}

// oneGet is the least a shared check costs: one GET of the tenant's key
// per request (the key never exists; nil is the usual answer). A Redis
// error answers 503, like the other limiters without a failure policy.
func oneGet(client *redis.Client, n *counts) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := client.Get(c.Request.Context(), "oneget:{"+tenantID(c)+"}").Err(); err != nil && !errors.Is(err, redis.Nil) {
			n.onError(c, err)
			c.AbortWithStatus(http.StatusServiceUnavailable)
			return
		}
		c.Next()
	}
}

// redisRate is the minimal Gin middleware a user of redis_rate writes: one
// Allow per request on the tenant's key, 429 with Retry-After when denied.
func redisRate(lim *redis_rate.Limiter, n *counts) gin.HandlerFunc {
	q := redis_rate.Limit{Rate: refill, Burst: capacity, Period: time.Second}
	return func(c *gin.Context) {
		res, err := lim.Allow(c.Request.Context(), tenantID(c), q)
		if err != nil {
			n.onError(c, err)
			c.AbortWithStatus(http.StatusServiceUnavailable)
			return
		}
		c.Header("RateLimit-Remaining", strconv.Itoa(res.Remaining))
		if res.Allowed == 0 {
			c.Header("Retry-After", strconv.Itoa(int(res.RetryAfter/time.Second)+1))
			c.AbortWithStatus(http.StatusTooManyRequests)
			return
		}
		c.Next()
	}
}

// serve runs the service in configuration config on addr against the Redis
// at redisURL until SIGTERM or SIGINT.
func serve(config, addr, redisURL string) error {
	if *flagCPUProfile != "" {
		f, err := os.Create(*flagCPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	secret := []byte(os.Getenv(secretEnv))
	if len(secret) < 16 {
		return fmt.Errorf("%s: want a secret of at least 16 bytes", secretEnv)
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	client := redis.NewClient(opt)
	defer client.Close()
	var n counts
	limit, release, err := limiterMiddleware(config, client, &n)
	if err != nil {
		return err
	}
	defer release()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	if err := r.SetTrustedProxies(nil); err != nil {
		return err
	}
	r.GET(pathHealth, func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET(pathStats, func(c *gin.Context) {
		c.String(http.StatusOK, "%d %d %d %d %d\n", n.ok.Load(), n.limited.Load(), n.other.Load(), n.degraded.Load(), n.gone.Load())
	})
	chain := []gin.HandlerFunc{n.middleware, authenticate(secret)}
	if limit != nil {
		chain = append(chain, limit)
	}
	chain = append(chain, func(c *gin.Context) {
		t, _ := gate.TenantFromContext(c.Request.Context())
		c.JSON(http.StatusOK, struct {
			Tenant string `json:"tenant"`
			Tier   string `json:"tier"`
		}{t.ID, t.Tier})
	})
	r.GET(pathProfile, chain...)

	srv := &http.Server{Addr: addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	n.errs.Range(func(k, v any) bool {
		fmt.Fprintf(os.Stderr, "limiter error x%d: %s\n", v.(*atomic.Int64).Load(), k)
		return true
	})
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
