package quota

import (
	"context"
	"errors"
	"fmt"
	"github.com/tollgate-go/tollgate/core/internal/anon"
	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/names"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Resolver gives the buckets that apply to a request of tenant t in class:
// usually the class bucket, and optionally a tenant-wide ceiling. Every
// bucket is charged atomically with the others. Bucket names must be unique
// within one answer.
type Resolver interface {
	Buckets(ctx context.Context, t Tenant, class string) ([]Bucket, error)
}

// ResolverFunc adapts a function to [Resolver].
type ResolverFunc func(ctx context.Context, t Tenant, class string) ([]Bucket, error)

// Buckets calls f.
func (f ResolverFunc) Buckets(ctx context.Context, t Tenant, class string) ([]Bucket, error) {
	return f(ctx, t, class)
}

// Tier is the default quotas of a tier of tenants.
type Tier struct {
	// Classes maps a class name to its bucket's quota.
	Classes map[string]Quota
	// Ceiling, if set, is a tenant-wide bucket (named CeilingBucket)
	// charged by every request of the tenant beside its class bucket.
	Ceiling *Quota
}

// Tiers is a static set of tiers.
type Tiers struct {
	// Tiers maps a tier name to its quotas.
	Tiers map[string]Tier
	// Default is the tier of a tenant whose Tier is empty.
	Default string
}

// Validate reports the first thing wrong with ts, naming the tier and class.
func (ts Tiers) Validate() error {
	if len(ts.Tiers) == 0 {
		return fmt.Errorf("%w: no tiers", errs.InvalidConfig)
	}
	if ts.Default != "" {
		if _, ok := ts.Tiers[ts.Default]; !ok {
			return fmt.Errorf("%w: default tier %q is not defined", errs.InvalidConfig, ts.Default)
		}
	}
	for name, tier := range ts.Tiers {
		if len(tier.Classes) == 0 {
			return fmt.Errorf("%w: tier %q has no classes", errs.InvalidConfig, name)
		}
		for class, q := range tier.Classes {
			if err := ValidateName(class); err != nil {
				return fmt.Errorf("%w: tier %q: %v", errs.InvalidConfig, name, err)
			}
			if class == CeilingBucket {
				return fmt.Errorf("%w: tier %q: class name %q is reserved for the tenant-wide ceiling", errs.InvalidConfig, name, class)
			}
			if err := q.Validate(); err != nil {
				return fmt.Errorf("tier %q class %q: %w", name, class, err)
			}
		}
		if tier.Ceiling != nil {
			if err := tier.Ceiling.Validate(); err != nil {
				return fmt.Errorf("tier %q ceiling: %w", name, err)
			}
			if tier.Ceiling.Concurrency > 0 {
				for class, q := range tier.Classes {
					if q.Concurrency > 0 {
						return fmt.Errorf("%w: tier %q: class %q and the ceiling both have a concurrency limit; a request may have one", ErrInvalid, name, class)
					}
				}
			}
		}
	}
	return nil
}

// buckets returns the tier defaults for (tier, class).
func (ts *Tiers) buckets(tierName, class string) ([]Bucket, error) {
	if tierName == "" {
		tierName = ts.Default
	}
	tier, ok := ts.Tiers[tierName]
	if !ok {
		return nil, fmt.Errorf("%w: unknown tier %q", errs.Resolve, names.Escape(tierName))
	}
	q, ok := tier.Classes[class]
	if !ok {
		return nil, fmt.Errorf("%w: tier %q has no class %q", errs.Resolve, names.Escape(tierName), names.Escape(class))
	}
	bs := make([]Bucket, 1, 2)
	bs[0] = Bucket{Name: class, Quota: q}
	if tier.Ceiling != nil {
		bs = append(bs, Bucket{Name: CeilingBucket, Quota: *tier.Ceiling})
	}
	return bs, nil
}

// Overrides is a source of per-tenant quota overrides, usually the primary
// database. An override replaces the tier default of one bucket (a class,
// or CeilingBucket) for one tenant.
type Overrides interface {
	// Overrides returns every override of tenantID in force now, by bucket
	// name; an empty map when there is none. An error means the source
	// failed (the resolver then serves the last known value).
	Overrides(ctx context.Context, tenantID string) (map[string]Quota, error)
}

// OverridesFunc adapts a function to [Overrides].
type OverridesFunc func(ctx context.Context, tenantID string) (map[string]Quota, error)

// Overrides calls f.
func (f OverridesFunc) Overrides(ctx context.Context, tenantID string) (map[string]Quota, error) {
	return f(ctx, tenantID)
}

// DefaultCacheTTL is how long a tenant's overrides are cached in process.
const DefaultCacheTTL = 45 * time.Second

// TieredResolver resolves quotas as tier defaults plus per-tenant overrides.
// Overrides are cached in process for a TTL (default 45 s), so the override
// source is off the hot path and a changed override takes effect at the next
// refresh, with no deploy.
//
// Stale-while-revalidate: once a tenant's entry is past its TTL, requests
// keep getting it while one background lookup refreshes it; only a tenant's
// first lookup waits, and never past the override timeout or (under a
// Limiter) the limiter's check timeout. A first lookup that does not answer
// in that time is not a store failure: the request gets the tier defaults
// (counted in Stats().Late and, under a Limiter, tollgate.overrides.late),
// and the lookup goes on in the background to fill the cache for the
// tenant's next request. Concurrent lookups for one tenant share one query
// (singleflight), and at most WithMaxLookups of them run at once: past
// that, a new tenant gets the tier defaults at once, so a flood of new
// tenants cannot pile up queries or goroutines. A caller whose own context
// ends first gets an error wrapping the context's. When the source fails,
// the last known overrides keep serving (stale-on-error), or the tier
// defaults if none was ever loaded, and it is asked again after a short
// pause: a failing or hung database never becomes an outage. Reading the
// cache takes no lock shared by tenants. It is safe for concurrent use.
type TieredResolver struct {
	tiers     atomic.Pointer[Tiers]
	overrides Overrides
	ttl       time.Duration
	retry     time.Duration
	timeout   time.Duration
	maxCache  int
	lookups   chan struct{} // a token per lookup in flight (WithMaxLookups)
	now       func() time.Time
	log       *slog.Logger

	cache   sync.Map // tenant ID -> *cacheEntry
	size    atomic.Int64
	evictMu sync.Mutex
	group   singleflight.Group
	stats   ResolverStats
}

// ResolverStats counts what a TieredResolver did, for tests and metrics.
// Hits are answers from a fresh entry, Misses first lookups (or after
// Invalidate), StaleServed answers from an expired entry (while it is
// refreshed, or after the source failed), Loads and LoadErrors the queries
// to the override source and their failures. Late counts first lookups
// answered with the tier defaults because the source did not answer in
// time or WithMaxLookups lookups were already in flight.
type ResolverStats struct {
	Hits, Misses, Loads, LoadErrors, StaleServed, Late atomic.Int64
}

type cacheEntry struct {
	overrides map[string]Quota
	expires   time.Time
	loaded    bool // false: never loaded successfully (tier defaults served)
	// refreshing is set by the one request that starts the background
	// refresh of this (expired) entry
	refreshing atomic.Bool
}

// Option configures a TieredResolver.
// One given a value it cannot use makes NewResolver fail with an error
// naming it and wrapping core.ErrInvalidConfig.
type Option interface{ applyResolver(*TieredResolver) error }

type resolverOptionFunc func(*TieredResolver) error

func (f resolverOptionFunc) applyResolver(r *TieredResolver) error { return f(r) }

// WithOverrides sets the override source. Default: none (tier defaults only).
func WithOverrides(o Overrides) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		if o != nil {
			r.overrides = o
		}
		return nil
	})
}

// WithCacheTTL sets how long overrides are cached; d must be
// positive. Default 45 s.
func WithCacheTTL(d time.Duration) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		return errs.SetPositive(&r.ttl, "quota.WithCacheTTL", "ttl", d)
	})
}

// WithTimeout bounds one override lookup. d must be positive.
// Default 2 s. The lookup runs in the background, shared by every request
// for the same tenant (singleflight), and outlives a single caller's
// cancellation; no request waits for it longer than its own deadline (and,
// under a Limiter, the limiter's check timeout).
func WithTimeout(d time.Duration) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		return errs.SetPositive(&r.timeout, "quota.WithTimeout", "timeout", d)
	})
}

// WithMaxLookups bounds the override lookups in flight at once, first
// lookups and refreshes together; n must be positive. Default 64. A
// tenant whose first lookup finds them all busy gets the tier defaults at
// once (counted as late) and is looked up again on its next request; an
// expired entry keeps serving until a refresh can start. Size it to what
// the override source serves at once (its connection pool).
func WithMaxLookups(n int) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		var v int
		if err := errs.SetPositive(&v, "quota.WithMaxLookups", "n", n); err != nil {
			return err
		}
		r.lookups = make(chan struct{}, v)
		return nil
	})
}

// WithCacheSize bounds the number of tenants whose overrides are cached.
// n must be positive. Default 100,000. When full, expired entries are
// dropped first, then arbitrary ones (they are reloaded on their next use).
func WithCacheSize(n int) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		return errs.SetPositive(&r.maxCache, "quota.WithCacheSize", "size", n)
	})
}

// WithLogger sets the logger for override-source failures. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		if l != nil {
			r.log = l
		}
		return nil
	})
}

// WithClock takes the time from now instead of the system clock, to expire
// cached overrides (tests, simulations: pass the clock a Limiter runs on,
// core.WithClock). nil is ignored. Default time.Now.
func WithClock(now func() time.Time) Option {
	return resolverOptionFunc(func(r *TieredResolver) error {
		if now != nil {
			r.now = now
		}
		return nil
	})
}

// NewResolver returns a resolver over tiers, which must be valid.
func NewResolver(tiers Tiers, opts ...Option) (*TieredResolver, error) {
	if err := tiers.Validate(); err != nil {
		return nil, err
	}
	r := &TieredResolver{ttl: DefaultCacheTTL, timeout: 2 * time.Second, maxCache: 100_000,
		lookups: make(chan struct{}, 64), now: time.Now, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			if err := o.applyResolver(r); err != nil {
				return nil, err
			}
		}
	}
	// After a failed load, try again after this long rather than on every
	// request: a struggling database is not hammered by the hot path.
	r.retry = min(r.ttl, 5*time.Second)
	r.tiers.Store(&tiers)
	return r, nil
}

// SetTiers replaces the tier defaults atomically (a configuration reload).
// An invalid set is refused and the old one kept.
func (r *TieredResolver) SetTiers(tiers Tiers) error {
	if err := tiers.Validate(); err != nil {
		return err
	}
	r.tiers.Store(&tiers)
	return nil
}

// Tiers returns the tier defaults in force.
func (r *TieredResolver) Tiers() Tiers { return *r.tiers.Load() }

// Stats returns the resolver's counters.
func (r *TieredResolver) Stats() *ResolverStats { return &r.stats }

// Invalidate drops tenantID's cached overrides, so the next request loads them.
func (r *TieredResolver) Invalidate(tenantID string) {
	if _, ok := r.cache.LoadAndDelete(tenantID); ok {
		r.size.Add(-1)
	}
}

// Buckets implements [Resolver].
func (r *TieredResolver) Buckets(ctx context.Context, t Tenant, class string) ([]Bucket, error) {
	bs, _, err := r.BucketsWithin(ctx, t, class, 0)
	return bs, err
}

// Why a first lookup was answered with the tier defaults (BucketsWithin's
// late, the cause label of tollgate.overrides.late).
const (
	lateTimeout = "timeout" // the source did not answer within the wait
	lateBusy    = "busy"    // WithMaxLookups lookups were in flight
)

// BucketsWithin is Buckets for a caller that waits at most wait for a
// tenant's first override lookup (a Limiter passes its check timeout; 0 or
// more than WithTimeout: WithTimeout's), also saying why the answer is the
// tier defaults in place of overrides not loaded in time: "timeout" (the
// source did not answer within the wait) or "busy" (WithMaxLookups lookups
// were in flight); "" when it is not. A Limiter given r calls it in place
// of Buckets, and counts those answers (tollgate.overrides.late); a
// resolver wrapping r may offer it too, with this signature, to keep that.
func (r *TieredResolver) BucketsWithin(ctx context.Context, t Tenant, class string, wait time.Duration) ([]Bucket, string, error) {
	bs, err := r.tiers.Load().buckets(t.Tier, class)
	if err != nil || r.overrides == nil || anon.Is(t.ID) {
		// anonymous callers (Gate's WithAnonymous) have no overrides: a
		// lookup per new address would put the database in their hands
		return bs, "", err
	}
	ov, late, err := r.lookup(ctx, t.ID, wait)
	if err != nil {
		return nil, "", err
	}
	for i := range bs {
		if q, ok := ov[bs[i].Name]; ok && q.Validate() == nil {
			bs[i].Quota = q
		}
	}
	return bs, late, nil
}

// errLookupWait is returned when the caller's context ended before a
// tenant's first override lookup answered (it is not ErrResolve): the
// limiter answers the check as canceled.
var errLookupWait = errors.New("override lookup did not answer in time")

// errBusy is a lookup that did not start: WithMaxLookups were in flight.
var errBusy = errors.New("too many override lookups in flight")

// query is the singleflight call loading tenantID, when a lookup token is
// free; errBusy otherwise (it returns at once, so a flood of new tenants
// holds no goroutine waiting for the source).
func (r *TieredResolver) query(ctx context.Context, tenantID string) func() (any, error) {
	return func() (any, error) {
		select {
		case r.lookups <- struct{}{}:
		default:
			return nil, errBusy
		}
		defer func() { <-r.lookups }()
		return r.load(ctx, tenantID), nil
	}
}

func (r *TieredResolver) lookup(ctx context.Context, tenantID string, wait time.Duration) (map[string]Quota, string, error) {
	now := r.now()
	if v, ok := r.cache.Load(tenantID); ok {
		e := v.(*cacheEntry)
		if now.Before(e.expires) {
			r.stats.Hits.Add(1)
			return e.overrides, "", nil
		}
		// expired: serve it, and let one request start the refresh
		r.stats.StaleServed.Add(1)
		if e.refreshing.CompareAndSwap(false, true) {
			go func() {
				r.group.Do(tenantID, r.query(ctx, tenantID))
				// A load replaces e. If e is still cached, this refresh
				// joined a call that began before e expired and loaded
				// nothing, or found every lookup token taken: let the next
				// request start another.
				e.refreshing.Store(false)
			}()
		}
		return e.overrides, "", nil
	}
	r.stats.Misses.Add(1)
	ch := r.group.DoChan(tenantID, r.query(ctx, tenantID))
	if wait <= 0 || wait > r.timeout {
		wait = r.timeout
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res.Err != nil { // errBusy
			r.stats.Late.Add(1)
			return nil, lateBusy, nil
		}
		ov, _ := res.Val.(map[string]Quota)
		return ov, "", nil
	case <-timer.C:
		// not a store failure: the tier defaults serve, and the lookup
		// goes on to fill the cache for the next request
		r.stats.Late.Add(1)
		return nil, lateTimeout, nil
	case <-ctx.Done():
		return nil, "", fmt.Errorf("%w: tenant %s: %w", errLookupWait, names.Escape(tenantID), ctx.Err())
	}
}

// load queries the override source for tenantID and caches the answer (or,
// on failure, the last known overrides until the retry pause ends). It
// returns the overrides to serve.
func (r *TieredResolver) load(ctx context.Context, tenantID string) map[string]Quota {
	// the lookup outlives its callers' cancellation: its result serves
	// every waiter and the cache
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	r.stats.Loads.Add(1)
	ov, err := r.overrides.Overrides(lctx, tenantID)
	now := r.now()
	var old *cacheEntry
	if v, ok := r.cache.Load(tenantID); ok {
		old = v.(*cacheEntry)
	}
	if err != nil {
		ne := &cacheEntry{expires: now.Add(r.retry)}
		if old != nil {
			ne.overrides, ne.loaded = old.overrides, old.loaded
		}
		r.store(tenantID, ne, now)
		r.stats.LoadErrors.Add(1)
		r.log.Warn("tollgate: override source failed; serving last known quotas",
			"tenant", names.Escape(tenantID), "stale", ne.loaded, "err", err)
		return ne.overrides
	}
	for name, q := range ov {
		if err := q.Validate(); err != nil {
			r.log.Warn("tollgate: ignoring an invalid override; the tier default applies",
				"tenant", names.Escape(tenantID), "bucket", names.Escape(name), "err", err)
		}
	}
	if old != nil && old.loaded && !sameOverrides(old.overrides, ov) {
		r.log.Info("tollgate: quota override changed", "tenant", names.Escape(tenantID),
			"old", fmtOverrides(old.overrides), "new", fmtOverrides(ov))
	}
	r.store(tenantID, &cacheEntry{overrides: ov, expires: now.Add(r.ttl), loaded: true}, now)
	return ov
}

// store caches e for tenantID, making room first when the cache is full.
func (r *TieredResolver) store(tenantID string, e *cacheEntry, now time.Time) {
	if _, loaded := r.cache.Swap(tenantID, e); !loaded {
		if r.size.Add(1) > int64(r.maxCache) {
			r.evict(now)
		}
	}
}

// evict brings the cache back under its bound: expired entries first, then
// arbitrary ones (they are reloaded on their next use), down to 3/4.
func (r *TieredResolver) evict(now time.Time) {
	if !r.evictMu.TryLock() {
		return // another request is evicting
	}
	defer r.evictMu.Unlock()
	r.cache.Range(func(k, v any) bool {
		if !now.Before(v.(*cacheEntry).expires) {
			if _, ok := r.cache.LoadAndDelete(k); ok {
				r.size.Add(-1)
			}
		}
		return true
	})
	r.cache.Range(func(k, _ any) bool { // map order is random enough
		if r.size.Load() < int64(r.maxCache)*3/4 {
			return false
		}
		if _, ok := r.cache.LoadAndDelete(k); ok {
			r.size.Add(-1)
		}
		return true
	})
}

func sameOverrides(a, b map[string]Quota) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func fmtOverrides(m map[string]Quota) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(names.Escape(k) + "=" + m[k].String())
	}
	return b.String()
}
