package config

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// MaxFileSize is the largest configuration file accepted, 1 MiB.
const MaxFileSize = 1 << 20

// Limits on durations in the file.
const (
	// MaxTimeout is the longest store timeout accepted.
	MaxTimeout = time.Minute
	// MaxCacheTTL is the longest override cache TTL accepted.
	MaxCacheTTL = 24 * time.Hour
	// MaxPathLen is the longest route path accepted, in bytes.
	MaxPathLen = 1024
)

// Config is a parsed, validated configuration file. Every field holds its
// default when the file leaves it out. A Config is read-only once returned;
// share it freely.
type Config struct {
	// Source names where the configuration came from (the file name).
	Source string
	// Version is the schema version, 1.
	Version int
	// Tiers is the tier defaults, with Default set from default_tier.
	Tiers quota.Tiers
	// Routes is the file's routes list as core route keys: "METHOD
	// /pattern", or "/pattern" for method *.
	Routes gate.Routes
	// GRPCMethods is the file's grpc_methods list: full methods
	// ("/pkg.Service/Method") and service wildcards ("/pkg.Service/*").
	// No key is in both Routes and GRPCMethods.
	GRPCMethods gate.Routes
	// AnonymousTier, when set, admits callers without a tenant on this
	// tier, keyed by client IP (gate.WithAnonymous); empty, they are
	// answered 401.
	AnonymousTier string
	// HeaderStyle is the rate-limit header families HTTP adapters emit.
	// Default render.DefaultHeaderStyle.
	HeaderStyle render.HeaderStyle
	// FailurePolicy is what a check answers when Redis fails. Default
	// core.FailOpen.
	FailurePolicy core.FailurePolicy
	// Timeout bounds one check's Redis call. Default core.DefaultTimeout.
	Timeout time.Duration
	// CacheTTL is how long a tenant's overrides are cached. Default
	// quota.DefaultCacheTTL.
	CacheTTL time.Duration
	// KeyPrefix is the Redis key prefix. Default core.DefaultPrefix.
	KeyPrefix string
	// Breaker is the circuit breaker (core.WithCircuitBreaker); nil
	// leaves core's default (5 consecutive failures, 1 s).
	Breaker *Breaker
	// LocalFallback, when not 0, answers from in-process buckets at this
	// share of each quota while the store fails (core.WithLocalFallback).
	LocalFallback float64
	// DenyCache turns on the deny cache (core.WithDenyCache).
	DenyCache bool
	// Shadow puts every class in shadow mode (core.WithShadow);
	// ShadowClasses only those listed (core.WithShadowClasses).
	Shadow        bool
	ShadowClasses []string
	// Leases is token leases by class (core.WithLeases).
	Leases map[string]Lease
	// Batching coalesces concurrent checks into pipelines
	// (core.WithBatching). Default true.
	Batching bool
}

// Load reads, parses and validates the configuration file at path. Errors
// name the file, the line and the field at fault; see [Parse].
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// afterRead, when set by a test, runs after each read of the file and
// before it is checked for changes, so that a test can change the file
// exactly while it is being read. attempt counts from 0.
var afterRead func(attempt int)

// maxReadAttempts bounds how often readFile reads a file that keeps
// changing while it is read; readRetryDelay is the pause before the
// second read, doubled before each next one.
const (
	maxReadAttempts = 3
	readRetryDelay  = 10 * time.Millisecond
)

// readFile reads the configuration file at path. A file that changes while
// it is read (its size or modification time moves, or another file is
// renamed into its place) is read again, at most maxReadAttempts times in
// all: a writer caught between two writes would otherwise hand over the
// first part, which may well be valid on its own. This narrows the window
// but cannot close it (a writer may pause between writes longer than a
// read takes), which is why writers should write a temporary file and
// rename it into place.
func readFile(path string) ([]byte, error) {
	data, _, err := readFileTime(path)
	return data, err
}

// readFileTime is readFile that also returns the file's modification time.
func readFileTime(path string) ([]byte, time.Time, error) {
	delay := readRetryDelay
	for attempt := 0; ; attempt++ {
		data, mtime, settled, err := readOnce(path, attempt)
		if err != nil || settled {
			return data, mtime, err
		}
		if attempt+1 == maxReadAttempts {
			return nil, time.Time{}, fmt.Errorf("%w: %s: the file changed while it was read, %d times; write it to a temporary file and rename it into place",
				core.ErrInvalidConfig, path, maxReadAttempts)
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// readOnce reads the file at path once, and its modification time. settled reports that the file was
// the same before and after: same file at path, same size, same
// modification time, and as many bytes read as its size.
func readOnce(path string, attempt int) (data []byte, mtime time.Time, settled bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	if !st.Mode().IsRegular() {
		return nil, time.Time{}, false, fmt.Errorf("%w: %s: not a regular file", core.ErrInvalidConfig, path)
	}
	if st.Size() > MaxFileSize {
		return nil, time.Time{}, false, fmt.Errorf("%w: %s: file is %d bytes, larger than %d", core.ErrInvalidConfig, path, st.Size(), MaxFileSize)
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	if afterRead != nil {
		afterRead(attempt)
	}
	if len(data) > MaxFileSize {
		return nil, time.Time{}, false, fmt.Errorf("%w: %s: file is larger than %d bytes", core.ErrInvalidConfig, path, MaxFileSize)
	}
	after, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	atPath, err := os.Stat(path)
	if err != nil {
		// Gone or replaced mid-read: read again, and report what the
		// next read finds.
		return nil, time.Time{}, false, nil
	}
	settled = int64(len(data)) == st.Size() && after.Size() == st.Size() && after.ModTime().Equal(st.ModTime()) &&
		os.SameFile(st, atPath)
	return data, st.ModTime(), settled, nil
}

// LimiterOptions returns the limiter options the file sets: key prefix,
// failure policy, timeout, breaker, local fallback, deny cache, shadow
// mode, leases and batching. Append your own after them to take
// precedence.
func (c *Config) LimiterOptions() []core.Option {
	opts := []core.Option{
		core.WithPrefix(c.KeyPrefix),
		core.WithFailurePolicy(c.FailurePolicy),
		core.WithTimeout(c.Timeout),
		core.WithDenyCache(c.DenyCache),
		core.WithShadow(c.Shadow),
		core.WithBatching(c.Batching),
	}
	if b := c.Breaker; b != nil {
		opts = append(opts, core.WithCircuitBreaker(b.Threshold, b.Cooldown))
	}
	if c.LocalFallback != 0 {
		opts = append(opts, core.WithLocalFallback(c.LocalFallback))
	}
	if len(c.ShadowClasses) > 0 {
		opts = append(opts, core.WithShadowClasses(c.ShadowClasses...))
	}
	for _, class := range slices.Sorted(maps.Keys(c.Leases)) {
		l := c.Leases[class]
		opts = append(opts, core.WithLeases(class, l.Size, l.TTL))
	}
	return opts
}

// GateOptions returns the gate options the file sets, for the gate.Gate
// every adapter takes (gate.New): the route table (routes and grpc_methods
// together), the header style and, when anonymous_tier is set, anonymous
// callers. Options given after them take precedence.
func (c *Config) GateOptions() []gate.Option {
	rs := make(gate.Routes, len(c.Routes)+len(c.GRPCMethods))
	maps.Copy(rs, c.Routes)
	maps.Copy(rs, c.GRPCMethods)
	opts := []gate.Option{gate.WithRoutes(rs), gate.WithHeaderStyle(c.HeaderStyle)}
	if c.AnonymousTier != "" {
		opts = append(opts, gate.WithAnonymous(c.AnonymousTier))
	}
	return opts
}

// ResolverOptions returns the resolver options the file sets: the override
// cache TTL.
func (c *Config) ResolverOptions() []quota.Option {
	return []quota.Option{quota.WithCacheTTL(c.CacheTTL)}
}

// NewResolver returns a resolver over the file's tiers with the file's cache
// TTL; opts (for example quota.WithOverrides) come after and take precedence.
func (c *Config) NewResolver(opts ...quota.Option) (*quota.TieredResolver, error) {
	return quota.NewResolver(c.Tiers, append(c.ResolverOptions(), opts...)...)
}

// NewLimiter returns a limiter over client and r with the file's options;
// opts come after and take precedence.
func (c *Config) NewLimiter(client redis.UniversalClient, r quota.Resolver, opts ...core.Option) (*core.Limiter, error) {
	return core.New(client, r, append(c.LimiterOptions(), opts...)...)
}

// CheckReload reports whether next can be applied by a [Reloader] over c,
// the configuration the service was started with. A reload swaps the tiers
// only: c's route table (routes and grpc_methods) and anonymous_tier stay
// in the gate until a restart, so next's tiers must still serve them. Every
// class a route of c names must be a class of every tier of next, with a
// capacity (and a ceiling capacity) no smaller than the route's cost, and
// c's anonymous_tier must be a tier of next. Every tier of c must be a
// tier of next too: a tenant of a dropped tier would fail every check (an
// unknown tier). Otherwise those requests would
// fail until a restart, and the error, an [*Error], names next's file, the
// tier or class at fault and the route of c that needs it.
//
// Both must come from [Load] or [Parse], which check each file on its own.
func (c *Config) CheckReload(next *Config) error {
	if c == nil || next == nil {
		return fmt.Errorf("%w: CheckReload of a nil configuration", core.ErrInvalidConfig)
	}
	p := &parser{file: next.Source}
	tiers := next.Tiers.Tiers
	x := newTierIndex(tiers, nil)
	if a := c.AnonymousTier; a != "" {
		if _, ok := tiers[a]; !ok {
			p.fail(0, "tiers", "tier %q is not defined, but it is the anonymous_tier of the running configuration: until a restart, anonymous callers would fail", a)
		}
	}
	for _, tn := range slices.Sorted(maps.Keys(c.Tiers.Tiers)) {
		if _, ok := tiers[tn]; !ok {
			p.fail(0, "tiers", "tier %q is not defined, but the running configuration defines it: its tenants' requests would fail (an unknown tier) from the reload on; move them to another tier first, then drop it with a restart", tn)
		}
	}
	check := func(what string, r gate.Route) {
		if r.Exempt || r.Class == "" || x.everyKnown(r.Class) && x.admits(r.Class, r.Cost) || !p.reporting() {
			return // every tier serves it, or no more problems are reported
		}
		for _, tn := range x.names {
			t := tiers[tn]
			field := "tiers." + tn
			q, ok := t.Classes[r.Class]
			switch {
			case !ok:
				p.fail(0, field+".classes", "class %q is not defined, but %s of the running configuration names it: until a restart, its requests would fail", r.Class, what)
			case r.Cost > q.Capacity:
				p.fail(0, field+".classes."+r.Class+".capacity", "%d is less than the cost %d of %s of the running configuration: until a restart, such a request could never be admitted", q.Capacity, r.Cost, what)
			case t.Ceiling != nil && r.Cost > t.Ceiling.Capacity:
				p.fail(0, field+".ceiling.capacity", "%d is less than the cost %d of %s of the running configuration: until a restart, such a request could never be admitted", t.Ceiling.Capacity, r.Cost, what)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Routes)) {
		what := "route " + k
		if !strings.Contains(k, " ") {
			what = "route * " + k // method *
		}
		check(what, c.Routes[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.GRPCMethods)) {
		check("gRPC method "+k, c.GRPCMethods[k])
	}
	return p.err()
}
