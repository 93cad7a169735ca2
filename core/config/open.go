package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Service is what a service needs from its configuration file: the Redis
// client, the resolver over the file's tiers, the limiter and the gate
// built with the file's options, and the watch that reloads the tiers when
// asked for one. Build it with [Open] or [OpenConfig]; release it with
// [Service.Close].
type Service struct {
	// Config is the file the Service was built from. With a watch, the
	// tiers in force are those of Reloader.Config().
	Config *Config
	// Redis is the client the limiter uses: opened from WithRedisURL
	// (and closed by Close) or given with WithRedisClient (and not).
	Redis redis.UniversalClient
	// Resolver serves the file's tiers and any overrides given with
	// WithResolverOptions.
	Resolver *quota.TieredResolver
	// Limiter is built with Config.LimiterOptions, then those of
	// WithLimiterOptions, over Resolver (or what WithLimiterResolver
	// made of it).
	Limiter *core.Limiter
	// Gate is built with Config.GateOptions, then those of
	// WithGateOptions: hand it to an adapter.
	Gate *gate.Gate
	// Reloader keeps Resolver's tiers in step with the file; nil unless
	// WithWatch was given.
	Reloader *Reloader

	closers []func() error
}

// Close stops the watch, closes the limiter (waiting for its batches in
// flight) and closes the Redis client if Open opened it, in that order. It
// returns the errors of those that failed. Close is not safe to call
// concurrently with itself; a second call does nothing.
func (s *Service) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// OpenOption configures [Open] and [OpenConfig]. An option given a value it
// cannot use makes them fail with an error naming the option and wrapping
// core.ErrInvalidConfig.
type OpenOption interface{ applyOpen(*openConfig) error }

type openOptionFunc func(*openConfig) error

func (f openOptionFunc) applyOpen(c *openConfig) error { return f(c) }

type openConfig struct {
	redisURL    string
	hasURL      bool
	client      redis.UniversalClient
	log         *slog.Logger
	limiterOpts []core.Option
	resolvOpts  []quota.Option
	gateOpts    []gate.Option
	limResolver func(*quota.TieredResolver) (quota.Resolver, error)
	watch       bool
	reloadOpts  []ReloadOption
	pingTimeout time.Duration
}

// DefaultPingTimeout bounds the check that Redis answers when a Service
// is opened, unless the context given to Open ends sooner.
const DefaultPingTimeout = 5 * time.Second

func badOpenOption(option, format string, args ...any) error {
	return fmt.Errorf("%w: config.%s: %s", core.ErrInvalidConfig, option, fmt.Sprintf(format, args...))
}

// WithRedisURL opens the Redis rawURL names (see [NewRedisClient] for the
// forms: one server, a Cluster, a Sentinel-managed master); Close closes
// it. Open checks that it answers. Exactly one of WithRedisURL and
// WithRedisClient is required.
func WithRedisURL(rawURL string) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		if rawURL == "" {
			return badOpenOption("WithRedisURL", "empty URL")
		}
		c.redisURL, c.hasURL = rawURL, true
		return nil
	})
}

// WithRedisClient uses a client the caller opened and closes; Close leaves
// it open. Open checks that it answers.
func WithRedisClient(client redis.UniversalClient) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		if client == nil {
			return badOpenOption("WithRedisClient", "nil client")
		}
		c.client = client
		return nil
	})
}

// WithLogger sends the limiter's, the resolver's and the watch's logs to l.
// Default slog.Default(). A logger given in WithLimiterOptions,
// WithResolverOptions or WithWatch takes precedence there.
func WithLogger(l *slog.Logger) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		if l == nil {
			return badOpenOption("WithLogger", "nil logger")
		}
		c.log = l
		return nil
	})
}

// WithLimiterOptions adds limiter options after the file's
// (Config.LimiterOptions), so they take precedence: a meter provider, a
// logger, a key prefix of your own. A later call adds to earlier ones.
func WithLimiterOptions(opts ...core.Option) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		c.limiterOpts = append(c.limiterOpts, opts...)
		return nil
	})
}

// WithResolverOptions adds resolver options after the file's
// (Config.ResolverOptions): quota.WithOverrides above all. A later call
// adds to earlier ones.
func WithResolverOptions(opts ...quota.Option) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		c.resolvOpts = append(c.resolvOpts, opts...)
		return nil
	})
}

// WithGateOptions adds gate options after the file's (Config.GateOptions),
// so they take precedence: a cost function, a header style of your own. A
// gate.WithRoutes given here replaces the file's whole route table, so
// put routes in the file instead. A later call adds to earlier ones.
func WithGateOptions(opts ...gate.Option) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		c.gateOpts = append(c.gateOpts, opts...)
		return nil
	})
}

// WithLimiterResolver makes the limiter resolve quotas through the
// resolver f returns, given the file's resolver (Service.Resolver, which
// the watch reloads): for a resolver with rules of its own that falls back
// to the file's tiers. An error from f, or a nil resolver, fails Open with
// that error. Default: the file's resolver.
func WithLimiterResolver(f func(tiers *quota.TieredResolver) (quota.Resolver, error)) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		if f == nil {
			return badOpenOption("WithLimiterResolver", "nil function")
		}
		c.limResolver = f
		return nil
	})
}

// WithWatch starts a [Reloader] of the file (Service.Reloader) with opts,
// stopped by Close: the tiers are reloaded when the file changes, and on
// the signals of WithSignals, from the very contents the Service was built
// from. Only [Open] can watch: [OpenConfig] has no file.
func WithWatch(opts ...ReloadOption) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		c.watch = true
		c.reloadOpts = append(c.reloadOpts, opts...)
		return nil
	})
}

// WithPingTimeout bounds the check that Redis answers at open. Default
// DefaultPingTimeout; d must be positive.
func WithPingTimeout(d time.Duration) OpenOption {
	return openOptionFunc(func(c *openConfig) error {
		if d <= 0 {
			return badOpenOption("WithPingTimeout", "must be positive, got %v", d)
		}
		c.pingTimeout = d
		return nil
	})
}

// Open reads the configuration file at path (see [Load]) and builds the
// [Service] it describes, over the Redis of WithRedisURL or
// WithRedisClient:
//
//	svc, err := config.Open(ctx, "tiers.yaml",
//		config.WithRedisURL(os.Getenv("REDIS_URL")),
//		config.WithResolverOptions(quota.WithOverrides(store)),
//		config.WithWatch(config.WithSignals(syscall.SIGHUP)))
//	defer svc.Close()
//	// svc.Gate to an adapter, svc.Limiter to a queue worker
//
// ctx bounds the opening only (the check that Redis answers); the watch
// runs until Close. On error nothing is left open. Every error wraps
// core.ErrInvalidConfig (an option, the URL, the file) except that of a
// Redis that does not answer, which names it.
func Open(ctx context.Context, path string, opts ...OpenOption) (*Service, error) {
	c, err := openOptions(opts)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("%w: config.Open: empty configuration path", core.ErrInvalidConfig)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, cfg, c)
	if err != nil {
		return nil, err
	}
	if c.watch {
		rl, err := NewReloader(path, s.Resolver, append([]ReloadOption{WithReloadLogger(c.log)}, c.reloadOpts...)...)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		// The watch starts from what the Service was built from: the
		// same bytes, so that a file replaced since is seen as a change
		// and checked against this file's routes.
		rl.seen, rl.haveSeen, rl.base = sha256.Sum256(data), true, cfg
		rl.cur.Store(cfg)
		rl.reloads.Add(1)
		rl.started.Store(true)
		wctx, cancel := context.WithCancel(context.Background())
		go rl.run(wctx, rl.notify())
		s.Reloader = rl
		s.closers = append(s.closers, func() error { cancel(); <-rl.Done(); return nil })
	}
	return s, nil
}

// OpenConfig builds the [Service] cfg describes, as [Open] does for a file:
// for a configuration parsed from memory (an embedded default). It cannot
// watch; WithWatch is an error.
func OpenConfig(ctx context.Context, cfg *Config, opts ...OpenOption) (*Service, error) {
	c, err := openOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: config.OpenConfig: nil configuration", core.ErrInvalidConfig)
	}
	if c.watch {
		return nil, badOpenOption("WithWatch", "OpenConfig has no file to watch; use Open with the file's path")
	}
	return open(ctx, cfg, c)
}

func openOptions(opts []OpenOption) (*openConfig, error) {
	c := &openConfig{log: slog.Default(), pingTimeout: DefaultPingTimeout}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyOpen(c); err != nil {
			return nil, err
		}
	}
	switch {
	case c.hasURL && c.client != nil:
		return nil, badOpenOption("WithRedisURL", "and WithRedisClient both given; give one")
	case !c.hasURL && c.client == nil:
		return nil, fmt.Errorf("%w: config: no Redis: give WithRedisURL or WithRedisClient", core.ErrInvalidConfig)
	}
	return c, nil
}

func open(ctx context.Context, cfg *Config, c *openConfig) (s *Service, err error) {
	s = &Service{Config: cfg, Redis: c.client}
	defer func() {
		if err != nil {
			_ = s.Close()
			s = nil
		}
	}()
	if c.hasURL {
		if s.Redis, err = NewRedisClient(c.redisURL); err != nil {
			return s, err
		}
		client := s.Redis
		s.closers = append(s.closers, client.Close)
	}
	pctx, cancel := context.WithTimeout(ctx, c.pingTimeout)
	defer cancel()
	if err := s.Redis.Ping(pctx).Err(); err != nil {
		where := describeClient(s.Redis)
		if c.hasURL {
			where = RedactURL(c.redisURL)
		}
		// not an ErrInvalidConfig: the configuration may be right and
		// Redis down
		return s, fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	ropts := append([]quota.Option{quota.WithLogger(c.log)}, cfg.ResolverOptions()...)
	if s.Resolver, err = quota.NewResolver(cfg.Tiers, append(ropts, c.resolvOpts...)...); err != nil {
		return s, fmt.Errorf("%s: resolver: %w", cfg.Source, err)
	}
	var limResolver quota.Resolver = s.Resolver
	if c.limResolver != nil {
		if limResolver, err = c.limResolver(s.Resolver); err != nil {
			return s, err
		}
		if limResolver == nil {
			return s, badOpenOption("WithLimiterResolver", "the function returned a nil resolver")
		}
	}
	lopts := append([]core.Option{core.WithLogger(c.log)}, cfg.LimiterOptions()...)
	if s.Limiter, err = core.New(s.Redis, limResolver, append(lopts, c.limiterOpts...)...); err != nil {
		return s, fmt.Errorf("%s: limiter: %w", cfg.Source, err)
	}
	s.closers = append(s.closers, s.Limiter.Close)
	if s.Gate, err = gate.New(s.Limiter, append(cfg.GateOptions(), c.gateOpts...)...); err != nil {
		return s, fmt.Errorf("%s: gate: %w", cfg.Source, err)
	}
	return s, nil
}

// describeClient names where a client given with WithRedisClient connects.
func describeClient(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr // "FailoverClient" for a Sentinel's
	case *redis.ClusterClient:
		return "the Cluster of " + strings.Join(c.Options().Addrs, ", ")
	case *redis.Ring:
		return "a Ring"
	}
	return fmt.Sprintf("a %T", c)
}
