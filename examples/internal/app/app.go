// Package app is the wiring the example services share, so that each
// example's main shows only its framework's part: configuration from the
// environment, Redis (or an embedded server), the override database, the
// tier file, JWT authentication and the Prometheus /metrics endpoint.
//
// The tier file is opened with config.Open as any user's program would: it
// builds the limiter and the gate once (App.Gate), every example hands the
// gate to its adapter, and none has a route table of its own.
package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples"
	"github.com/tollgate-go/tollgate/sqlquota"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// DefaultAddrs is where each example service listens unless ADDR says
// otherwise, by name: one port each, so that several run side by side, and
// none that tollgate-rls takes by default (127.0.0.1:8081, metrics :9464).
// Each is its docker-compose.yml host port plus 10.
var DefaultAddrs = map[string]string{
	"nethttp": "127.0.0.1:8091",
	"gin":     "127.0.0.1:8092",
	"echo":    "127.0.0.1:8093",
	"fiber":   "127.0.0.1:8094",
	"grpc":    "127.0.0.1:8095",
	"echov5":  "127.0.0.1:8097",
	"fiberv3": "127.0.0.1:8098",
	"connect": "127.0.0.1:8099",
}

// FallbackAddr is where a service DefaultAddrs does not name listens
// unless ADDR says otherwise.
const FallbackAddr = "127.0.0.1:8090"

// DefaultAddr is where the service called name listens unless ADDR says
// otherwise.
func DefaultAddr(name string) string {
	if a, ok := DefaultAddrs[name]; ok {
		return a
	}
	return FallbackAddr
}

// Config is what the environment says.
type Config struct {
	// Addr is the listen address (ADDR; default DefaultAddr of the
	// service's name).
	Addr string
	// RedisURL is the Redis to keep buckets in (REDIS_URL; empty: an
	// embedded in-process Redis-compatible server).
	RedisURL string
	// DatabaseURL holds the per-tenant overrides (DATABASE_URL:
	// postgres://... or sqlite://path; empty: a SQLite file in a temporary
	// directory).
	DatabaseURL string
	// ConfigPath is a tier configuration file (TOLLGATE_CONFIG; empty:
	// examples.DefaultConfig, built in). Its tiers are reloaded on change
	// and on SIGHUP.
	ConfigPath string
	// JWTSecret verifies HS256 tokens (TOLLGATE_JWT_SECRET). Empty or
	// DevSecret (which is public) only with Demo set.
	JWTSecret string
	// Demo allows the development secret (TOLLGATE_DEMO=1): anyone can
	// mint tokens for the service, so it is for a local demo only.
	Demo bool
	// KeyPrefix, when set, replaces the Redis key prefix (tests use a
	// random one). Not read from the environment.
	KeyPrefix string
	// Logger receives the service's logs. Default: text on stderr.
	Logger *slog.Logger
}

// FromEnv reads the configuration of the service called name from the
// environment (getenv is os.Getenv when nil).
func FromEnv(name string, getenv func(string) string) Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{
		Addr:        getenv("ADDR"),
		RedisURL:    getenv("REDIS_URL"),
		DatabaseURL: getenv("DATABASE_URL"),
		ConfigPath:  getenv("TOLLGATE_CONFIG"),
		JWTSecret:   getenv("TOLLGATE_JWT_SECRET"),
		Demo:        getenv("TOLLGATE_DEMO") == "1",
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr(name)
	}
	return c
}

// App is one service's shared parts, ready for a framework to mount.
type App struct {
	// Config is the configuration the App was opened with.
	Config Config
	// Limiter is the shared limiter.
	Limiter *core.Limiter
	// Resolver gives the tier defaults and the overrides.
	Resolver *quota.TieredResolver
	// Overrides is the per-tenant override store.
	Overrides *sqlquota.Store
	// Auth verifies bearer tokens.
	Auth *Verifier
	// File is the tier file read at start: the limiter and the gate were
	// built with its options.
	File *config.Config
	// Gate is the request flow every adapter takes, built once from File's
	// gate options (routes, header style, anonymous tier) and
	// gate.WithCostReports (POST /v1/complete is settled to its tokens).
	Gate *gate.Gate
	// Metrics serves the Prometheus text format.
	Metrics http.Handler
	// Log is the logger.
	Log *slog.Logger
	// lastLimiterLog is when LimiterError last logged (unix nanos), and
	// limiterErrors how many it was called with since
	lastLimiterLog atomic.Int64
	limiterErrors  atomic.Int64
	// Redis says which Redis the buckets are in.
	Redis string
	// Database says where the overrides are.
	Database string

	closers []func()
}

// Open connects everything c names. On error nothing is left open.
func Open(ctx context.Context, c Config) (a *App, err error) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a = &App{Config: c, Log: c.Logger}
	defer func() {
		if err != nil {
			a.Close()
			a = nil
		}
	}()

	secret := c.JWTSecret
	if secret == "" || secret == DevSecret {
		if !c.Demo {
			return a, errors.New("TOLLGATE_JWT_SECRET is not set, or is the examples' public development secret: " +
				"set your own, or TOLLGATE_DEMO=1 to run as a local demo that anyone can mint tokens for")
		}
		secret = DevSecret
		a.Log.Warn("demo mode (TOLLGATE_DEMO=1): using the development secret; anyone can mint tokens for this service")
	}

	var client redis.UniversalClient
	if client, a.Redis, err = a.openRedis(c.RedisURL); err != nil {
		return a, err
	}
	if a.Overrides, a.Database, err = a.openDatabase(ctx, c.DatabaseURL); err != nil {
		return a, err
	}

	mp, handler, shutdown, err := newMetrics()
	if err != nil {
		return a, err
	}
	a.Metrics = handler
	a.closers = append(a.closers, shutdown)

	// The one setup path: the tier file (or the built-in one) builds the
	// resolver, the limiter and the gate, and TOLLGATE_CONFIG is watched.
	lopts := []core.Option{core.WithMeterProvider(mp)}
	if c.KeyPrefix != "" {
		lopts = append(lopts, core.WithPrefix(c.KeyPrefix))
	}
	opts := []config.OpenOption{
		config.WithRedisClient(client),
		config.WithLogger(a.Log),
		config.WithResolverOptions(quota.WithOverrides(a.Overrides)),
		config.WithLimiterOptions(lopts...),
		// handlers may report a request's actual cost (POST /v1/complete):
		// the route's cost is then an estimate, settled when they return
		config.WithGateOptions(gate.WithCostReports()),
	}
	var svc *config.Service
	if c.ConfigPath != "" {
		svc, err = config.Open(ctx, c.ConfigPath, append(opts, config.WithWatch(config.WithSignals(syscall.SIGHUP)))...)
	} else {
		var builtin *config.Config
		if builtin, err = config.Parse("examples/tollgate.yaml (built in)", examples.DefaultConfig); err == nil {
			svc, err = config.OpenConfig(ctx, builtin, opts...)
		}
	}
	switch {
	case err != nil && errors.Is(err, core.ErrInvalidConfig):
		return a, fmt.Errorf("TOLLGATE_CONFIG: %w", err)
	case err != nil: // Redis does not answer
		return a, fmt.Errorf("REDIS_URL: %w", err)
	}
	a.closers = append(a.closers, func() { _ = svc.Close() })
	a.File, a.Resolver, a.Limiter, a.Gate = svc.Config, svc.Resolver, svc.Limiter, svc.Gate

	a.Auth, err = NewVerifier([]byte(secret), a.knownTier)
	if err != nil {
		return a, err
	}
	a.Auth.SetLogger(a.Log)
	return a, nil
}

// Close releases everything Open acquired, in reverse order.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// knownTier reports whether the tiers in force define tier. A token naming
// another tier is refused: the limiter could not resolve its quota.
func (a *App) knownTier(tier string) bool {
	ts := a.Resolver.Tiers()
	if tier == "" {
		tier = ts.Default
	}
	_, ok := ts.Tiers[tier]
	return ok
}

// Describe is one line saying what the service runs on.
func (a *App) Describe() string {
	cfg := a.File.Source
	if a.Config.ConfigPath != "" {
		cfg += " (tiers reloaded on change and SIGHUP)"
	}
	return fmt.Sprintf("redis: %s; overrides: %s; tiers: %s", a.Redis, a.Database, cfg)
}

func (a *App) openRedis(u string) (redis.UniversalClient, string, error) {
	if u == "" {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, "", fmt.Errorf("embedded Redis-compatible server: %w", err)
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		a.closers = append(a.closers, func() { _ = c.Close(); m.Close() })
		a.Log.Warn("REDIS_URL is not set: using an embedded in-process Redis-compatible server; replicas of this service will not share buckets")
		return c, "embedded (miniredis at " + m.Addr() + "; set REDIS_URL for a real Redis)", nil
	}
	c, err := config.NewRedisClient(u)
	if err != nil {
		return nil, "", fmt.Errorf("REDIS_URL: %w", err)
	}
	a.closers = append(a.closers, func() { _ = c.Close() })
	return c, config.RedactURL(u) + " (REDIS_URL)", nil
}

// openDatabase opens DATABASE_URL (or a SQLite file in a temporary
// directory) and creates the override table.
func (a *App) openDatabase(ctx context.Context, u string) (*sqlquota.Store, string, error) {
	if u == "" {
		dir, err := os.MkdirTemp("", "tollgate-example-")
		if err != nil {
			return nil, "", fmt.Errorf("temporary directory for the override database: %w", err)
		}
		a.closers = append(a.closers, func() { _ = os.RemoveAll(dir) })
		u = "sqlite://" + filepath.Join(dir, "overrides.db")
		a.Log.Info("DATABASE_URL is not set: overrides are kept in a temporary SQLite file", "DATABASE_URL", u)
	}
	var driver, dsn string
	var dialect sqlquota.Dialect
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		path := strings.TrimPrefix(u, "sqlite://")
		if path == "" || strings.Contains(path, "?") {
			return nil, "", fmt.Errorf("DATABASE_URL %q: want sqlite://path/to/file.db", u)
		}
		driver, dsn, dialect = "sqlite", "file:"+path+"?_pragma=busy_timeout(5000)", sqlquota.SQLite
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		driver, dsn, dialect = "pgx", u, sqlquota.Postgres
	default:
		scheme, _, _ := strings.Cut(u, ":")
		return nil, "", fmt.Errorf("DATABASE_URL: unsupported scheme %q (want postgres://... or sqlite://path)", scheme)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, "", fmt.Errorf("DATABASE_URL: %w", err)
	}
	a.closers = append(a.closers, func() { _ = db.Close() })
	s, err := sqlquota.New(db, dialect, sqlquota.WithLogger(a.Log))
	if err != nil {
		return nil, "", fmt.Errorf("DATABASE_URL: %w", err)
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Migrate(mctx); err != nil {
		return nil, "", fmt.Errorf("DATABASE_URL: %w", err)
	}
	return s, redact(u), nil
}

// redact hides a password in a database URL.
func redact(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return u
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// LimiterError logs an error an adapter's error hook reports (a degraded,
// shed or misconfigured check), at most once a second with the count of
// those it left out: under a flood every shed check reports one, and each is
// counted in the metrics already; a log line for each would turn one
// tenant's flood into a flood of the service's logs.
func (a *App) LimiterError(where string, err error) {
	a.limiterErrors.Add(1)
	now := time.Now().UnixNano()
	last := a.lastLimiterLog.Load()
	if now-last < int64(time.Second) || !a.lastLimiterLog.CompareAndSwap(last, now) {
		return
	}
	a.Log.Warn("rate limiter degraded", "where", where, "err", err, "errors", a.limiterErrors.Swap(0))
}
