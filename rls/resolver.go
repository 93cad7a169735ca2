package rls

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Rules holds the current [Config] of a Server (see [WithRules]) and
// resolves its buckets: the Server passes them with each check, and Rules
// is a quota.Resolver too, for a limiter that resolves through it.
// Classes beginning with [ruleClassPrefix] are the rules' own
// buckets; every other class (a rule's tollgate.class, or a request
// without a configuration) goes to the tier resolver, tiers and
// overrides. It is safe for concurrent use; [Rules.Set] swaps the
// configuration atomically.
type Rules struct {
	cur   atomic.Pointer[Config]
	tiers *quota.TieredResolver
}

// NewRules returns Rules over cfg, falling back to tiers for the services'
// classes. tiers may be nil when no rule names a tenant (tollgate.tenant);
// such a rule then answers "no quota configured". cfg may be nil: no
// configuration yet (every domain unknown, every descriptor answered OK)
// until [Rules.Set] or [Rules.Watch] loads one.
func NewRules(cfg *Config, tiers *quota.TieredResolver) (*Rules, error) {
	if cfg == nil {
		cfg = &Config{domains: map[string]*ruleNode{}, rules: map[string]*rule{}}
	}
	r := &Rules{tiers: tiers}
	r.cur.Store(cfg)
	return r, nil
}

// Set replaces the configuration; checks in flight finish with the one
// they started with. nil is ignored.
func (r *Rules) Set(cfg *Config) {
	if cfg != nil {
		r.cur.Store(cfg)
	}
}

// Domains returns the current configuration's domains, sorted (none
// before one is loaded).
func (r *Rules) Domains() []string { return r.current().Domains() }

// current returns the current configuration.
func (r *Rules) current() *Config { return r.cur.Load() }

// Buckets implements quota.Resolver: a rule's class by the current
// configuration, any other by the tier resolver. A Server answering by
// the rules does not ask it for the rules' classes: it passes their
// buckets, from the configuration it matched the request against, with
// the check (core.Request's Resolved).
func (r *Rules) Buckets(ctx context.Context, t quota.Tenant, class string) ([]quota.Bucket, error) {
	if !strings.HasPrefix(class, ruleClassPrefix) {
		if r.tiers == nil {
			return nil, fmt.Errorf("%w: class %q: no tier file configured", core.ErrResolve, class)
		}
		return r.tiers.Buckets(ctx, t, class)
	}
	if bs := r.current().buckets(class); bs != nil {
		return bs, nil
	}
	return nil, fmt.Errorf("%w: no rule has the class %q", core.ErrResolve, class)
}

// buckets returns the bucket of a rule's class (or of a descriptor's limit
// override) in c; nil for a class c does not resolve: a tier class (the
// tier resolver's) or one no rule has.
func (c *Config) buckets(class string) []quota.Bucket {
	if !strings.HasPrefix(class, ruleClassPrefix) {
		return nil
	}
	if q, ok := overrideQuota(class); ok {
		return []quota.Bucket{{Name: class, Quota: q}}
	}
	if ru := c.rules[class]; ru != nil && ru.tenantKey == "" && !ru.unlimited && !ru.zero {
		return []quota.Bucket{{Name: class, Quota: ru.quota}}
	}
	return nil
}

// resolved returns the buckets c gives classes, for core.Request's
// Resolved: nil when c gives none of them (the limiter's resolver answers
// every class).
func (c *Config) resolved(classes []string) [][]quota.Bucket {
	var out [][]quota.Bucket
	for i, class := range classes {
		if bs := c.buckets(class); bs != nil {
			if out == nil {
				out = make([][]quota.Bucket, len(classes))
			}
			out[i] = bs
		}
	}
	return out
}

// knownTier reports whether tier is one of the tier file's.
func (r *Rules) knownTier(tier string) bool {
	if r.tiers == nil {
		return false
	}
	_, ok := r.tiers.Tiers().Tiers[tier]
	return ok
}

// overridePrefix begins the class of a descriptor's limit override
// (WithDescriptorLimits): envoy.limit.<requests_per_unit>.<unit>.
const overridePrefix = ruleClassPrefix + "limit."

func overrideClass(n uint32, u rlsv3.RateLimitResponse_RateLimit_Unit) string {
	return overridePrefix + strconv.FormatUint(uint64(n), 10) + "." + strings.ToLower(u.String())
}

func overrideQuota(class string) (quota.Quota, bool) {
	rest, ok := strings.CutPrefix(class, overridePrefix)
	if !ok {
		return quota.Quota{}, false
	}
	ns, us, ok := strings.Cut(rest, ".")
	if !ok {
		return quota.Quota{}, false
	}
	n, err := strconv.ParseUint(ns, 10, 32)
	u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(us)]
	if err != nil || n == 0 || !known {
		return quota.Quota{}, false
	}
	q, err := unitQuota(uint32(n), rlsv3.RateLimitResponse_RateLimit_Unit(u), 1)
	return q, err == nil
}

// Watch reloads the configuration from path (as [LoadConfig], with opts)
// whenever a file's name, size or modification time changes, checking
// every interval (at least 100 ms), until ctx ends. An invalid new configuration is
// logged and the old one kept. The channel closes when it has stopped.
func (r *Rules) Watch(ctx context.Context, path string, every time.Duration, log *slog.Logger, opts ...LoadOption) <-chan struct{} {
	every = max(every, 100*time.Millisecond)
	if log == nil {
		log = slog.Default()
	}
	done := make(chan struct{})
	last := stamp(path)
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := stamp(path)
			if now == last {
				continue
			}
			last = now
			cfg, err := LoadConfig(path, opts...)
			if err != nil {
				log.Error("rls: configuration not reloaded; the previous one stays", "path", path, "err", err)
				continue
			}
			r.Set(cfg)
			log.Info("rls: configuration reloaded", "path", path, "domains", strings.Join(cfg.Domains(), ","))
		}
	}()
	return done
}

// stamp summarizes the files under path (names, sizes, times).
func stamp(path string) string {
	var b strings.Builder
	st, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	add := func(name string, fi os.FileInfo) {
		fmt.Fprintf(&b, "%s %d %d\n", name, fi.Size(), fi.ModTime().UnixNano())
	}
	add(path, st)
	if st.IsDir() {
		ents, _ := os.ReadDir(path)
		for _, e := range ents {
			if fi, err := os.Stat(filepath.Join(path, e.Name())); err == nil {
				add(e.Name(), fi)
			}
		}
	}
	return b.String()
}
