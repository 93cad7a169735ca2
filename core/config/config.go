package config

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
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
	Tiers core.Tiers
	// Routes maps HTTP routes to (class, cost), in file order.
	Routes []Route
	// GRPCMethods maps gRPC methods to (class, cost), in file order.
	GRPCMethods []GRPCMethod
	// HeaderStyle is the rate-limit header families HTTP adapters emit.
	// Default core.DefaultHeaderStyle.
	HeaderStyle core.HeaderStyle
	// FailurePolicy is what a check answers when Redis fails. Default
	// core.FailOpen.
	FailurePolicy core.FailurePolicy
	// Timeout bounds one check's Redis call. Default core.DefaultTimeout.
	Timeout time.Duration
	// CacheTTL is how long a tenant's overrides are cached. Default
	// core.DefaultOverrideCacheTTL.
	CacheTTL time.Duration
	// KeyPrefix is the Redis key prefix. Default core.DefaultPrefix.
	KeyPrefix string

	routes map[routeKey]int
	grpc   map[string]int
}

// Route maps an HTTP route to the class and cost of its requests.
type Route struct {
	// Method is an HTTP method in upper case, or "*" for every method.
	Method string
	// Path is the route's pattern as the framework names it (Gin's
	// FullPath, Echo's Path, net/http's Request.Pattern without the
	// method), matched exactly.
	Path string
	// Class is the bucket the request is charged to.
	Class string
	// Cost is the number of tokens one request takes (default 1).
	Cost int64
	// Line is the route's line in the file.
	Line int
}

// GRPCMethod maps a gRPC method to the class and cost of its calls.
type GRPCMethod struct {
	// Method is a full method name, "/package.Service/Method", or
	// "/package.Service/*" for every method of the service.
	Method string
	// Class is the bucket the call is charged to.
	Class string
	// Cost is the number of tokens one call takes (default 1).
	Cost int64
	// Line is the entry's line in the file.
	Line int
}

type routeKey struct{ method, path string }

// Load reads, parses and validates the configuration file at path. Errors
// name the file, the line and the field at fault; see [Parse].
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: not a regular file", core.ErrInvalidConfig, path)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %s: file is %d bytes, larger than %d", core.ErrInvalidConfig, path, st.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrInvalidConfig, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s: file is larger than %d bytes", core.ErrInvalidConfig, path, MaxFileSize)
	}
	return data, nil
}

// Route returns the entry for an HTTP request of method to the route
// pattern path: an exact method match first, then a "*" entry.
func (c *Config) Route(method, path string) (Route, bool) {
	if i, ok := c.routes[routeKey{method, path}]; ok {
		return c.Routes[i], true
	}
	if i, ok := c.routes[routeKey{"*", path}]; ok {
		return c.Routes[i], true
	}
	return Route{}, false
}

// GRPCMethod returns the entry for a call of fullMethod
// ("/package.Service/Method"): an exact match first, then the service's
// "/package.Service/*" entry.
func (c *Config) GRPCMethod(fullMethod string) (GRPCMethod, bool) {
	if i, ok := c.grpc[fullMethod]; ok {
		return c.GRPCMethods[i], true
	}
	if svc, _, ok := splitMethod(fullMethod); ok {
		if i, ok := c.grpc["/"+svc+"/*"]; ok {
			return c.GRPCMethods[i], true
		}
	}
	return GRPCMethod{}, false
}

// Options returns the limiter options the file sets: key prefix, failure
// policy and timeout. Append your own after them to take precedence.
func (c *Config) Options() []core.Option {
	return []core.Option{
		core.WithPrefix(c.KeyPrefix),
		core.WithFailurePolicy(c.FailurePolicy),
		core.WithTimeout(c.Timeout),
	}
}

// ResolverOptions returns the resolver options the file sets: the override
// cache TTL.
func (c *Config) ResolverOptions() []core.ResolverOption {
	return []core.ResolverOption{core.WithOverrideCacheTTL(c.CacheTTL)}
}

// NewResolver returns a resolver over the file's tiers with the file's cache
// TTL; opts (for example core.WithOverrides) come after and take precedence.
func (c *Config) NewResolver(opts ...core.ResolverOption) (*core.TieredResolver, error) {
	return core.NewResolver(c.Tiers, append(c.ResolverOptions(), opts...)...)
}

// NewLimiter returns a limiter over client and r with the file's options;
// opts come after and take precedence.
func (c *Config) NewLimiter(client redis.UniversalClient, r core.Resolver, opts ...core.Option) (*core.Limiter, error) {
	return core.New(client, r, append(c.Options(), opts...)...)
}
