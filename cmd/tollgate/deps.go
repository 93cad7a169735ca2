package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/sqlquota"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// openRedis connects to --redis-url and checks that it answers. The URL is
// one server's (redis://), a Cluster's (redis+cluster://h1:p1,h2:p2) or a
// Sentinel-managed master's (redis+sentinel://s1:p1,s2:p2/master), as
// config.NewRedisClient reads them.
func (e *env) openRedis(ctx context.Context) (redis.UniversalClient, error) {
	u := e.opts.redisURL
	if u == "" {
		return nil, usagef("no Redis: set --redis-url or REDIS_URL")
	}
	c, err := config.NewRedisClient(u)
	if err != nil {
		return nil, usagef("bad --redis-url: %v", strings.TrimPrefix(err.Error(), core.ErrInvalidConfig.Error()+": "))
	}
	pctx, cancel := context.WithTimeout(ctx, e.opts.timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", where(c, u), err)
	}
	return c, nil
}

// where names the Redis a client of rawURL connects to.
func where(c redis.UniversalClient, rawURL string) string {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return "the Cluster at " + strings.Join(c.Options().Addrs, ", ")
	case *redis.Client:
		if a := c.Options().Addr; a != "FailoverClient" {
			return a
		}
	}
	return config.RedactURL(rawURL)
}

// openLimiter connects to --redis-url (openRedis) and builds a limiter over
// it that takes its quotas from r. The caller closes the client.
func (e *env) openLimiter(ctx context.Context, r quota.Resolver, opts ...core.Option) (*core.Limiter, redis.UniversalClient, error) {
	client, err := e.openRedis(ctx)
	if err != nil {
		return nil, nil, err
	}
	lim, err := core.New(client, r, opts...)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return lim, client, nil
}

// openStore opens --database-url. mustExist: for SQLite, refuse to create a
// missing file (only migrate creates one).
func (e *env) openStore(mustExist bool) (*sqlquota.Store, func(), error) {
	u := e.opts.databaseURL
	if u == "" {
		return nil, nil, usagef("no database: set --database-url or DATABASE_URL (sqlite://path or postgres://...)")
	}
	var driver, dsn string
	var dialect sqlquota.Dialect
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		path, query, _ := strings.Cut(strings.TrimPrefix(u, "sqlite://"), "?")
		if path == "" {
			return nil, nil, usagef("bad --database-url %q: no file path (want sqlite://path/to/file.db)", u)
		}
		mode := "rwc"
		if mustExist {
			mode = "rw"
		}
		params := []string{"mode=" + mode, "_pragma=busy_timeout(5000)"}
		if query != "" {
			params = append(params, query)
		}
		driver, dsn, dialect = "sqlite", "file:"+path+"?"+strings.Join(params, "&"), sqlquota.SQLite
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		driver, dsn, dialect = "pgx", u, sqlquota.Postgres
	default:
		scheme, _, _ := strings.Cut(u, ":")
		return nil, nil, usagef("bad --database-url: unsupported scheme %q (want sqlite://path or postgres://...)", scheme)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	s, err := sqlquota.New(db, dialect, sqlquota.WithTable(e.opts.table))
	if err != nil {
		_ = db.Close()
		return nil, nil, usagef("%v", err)
	}
	return s, func() { _ = db.Close() }, nil
}

// dbHint adds what to do to the common database errors.
func dbHint(err error, s *sqlquota.Store) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such table") || (strings.Contains(msg, "relation") && strings.Contains(msg, "does not exist")):
		return fmt.Errorf("%w\n(the table %s does not exist: create it with 'tollgate override migrate')", err, s.Table())
	case strings.Contains(msg, "unable to open database file") || strings.Contains(msg, "out of memory (14)"):
		return fmt.Errorf("%w\n(the SQLite file cannot be opened: check the path; 'tollgate override migrate' creates it)", err)
	}
	return err
}

// loadConfig loads --config; required says whether it must be given.
func (e *env) loadConfig(required bool) (*config.Config, error) {
	if e.opts.configPath == "" {
		if required {
			return nil, usagef("no tier configuration: set --config FILE")
		}
		return nil, nil
	}
	cfg, err := config.Load(e.opts.configPath)
	if err != nil {
		return nil, configError("--config", err)
	}
	return cfg, nil
}

// configError says what is wrong with a tier file given as what: the
// file's problems under a heading, one a line, or what kept it from being
// read (a missing file) on one line.
func configError(what string, err error) error {
	if ce := (*config.Error)(nil); errors.As(err, &ce) {
		return fmt.Errorf("invalid %s:\n%w", what, err)
	}
	return fmt.Errorf("%s: %w", what, oneLine{err})
}

// oneLine is a read error said without core's "invalid configuration"
// heading, which the command's own message replaces.
type oneLine struct{ err error }

func (o oneLine) Error() string {
	return strings.TrimPrefix(o.err.Error(), core.ErrInvalidConfig.Error()+": ")
}

func (o oneLine) Unwrap() error { return o.err }

// prefix is --prefix, else the config's key_prefix, else the default.
func (e *env) prefix(cfg *config.Config) (string, error) {
	p := e.opts.prefix
	if p == "" && cfg != nil {
		p = cfg.KeyPrefix
	}
	if p == "" {
		p = core.DefaultPrefix
	}
	if _, err := keys.New(p); err != nil {
		return "", usagef("bad --prefix: %v", err)
	}
	return p, nil
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkTenant validates a tenant argument.
func checkTenant(id string) error {
	if err := keys.ValidateTenantID(id); err != nil {
		return usagef("bad tenant: %v", strings.TrimPrefix(err.Error(), core.ErrInvalidRequest.Error()+": "))
	}
	return nil
}

func checkBucket(name string) error {
	if err := quota.ValidateName(name); err != nil {
		return usagef("bad bucket %q: %v", keys.EscapeID(name), strings.TrimPrefix(err.Error(), core.ErrInvalidRequest.Error()+": "))
	}
	return nil
}

// storedOverrides reads tenant's overrides from --database-url, within
// --timeout.
func (e *env) storedOverrides(ctx context.Context, tenant string) (map[string]quota.Quota, error) {
	store, closeDB, err := e.openStore(true)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	dctx, cancel := context.WithTimeout(ctx, e.opts.timeout)
	defer cancel()
	ov, err := store.Overrides(dctx, tenant)
	if err != nil {
		return nil, dbHint(err, store)
	}
	return ov, nil
}

// fixedOverrides is a resolver option that serves ov, read once, as every
// tenant's overrides.
func fixedOverrides(ov map[string]quota.Quota) quota.Option {
	return quota.WithOverrides(quota.OverridesFunc(func(context.Context, string) (map[string]quota.Quota, error) {
		return ov, nil
	}))
}
