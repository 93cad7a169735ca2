package core

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/tokenbucket.lua
var tokenBucketSource string

var tokenBucket = redis.NewScript(tokenBucketSource)

// ScriptSource returns the Lua source of the token-bucket script, for tools
// that preload it (SCRIPT LOAD) or audit it.
func ScriptSource() string { return tokenBucketSource }

// MaxCost is the largest cost one request may take.
const MaxCost = MaxCapacity

// Request is one request to check.
type Request struct {
	// Tenant is the verified identity the request is charged to.
	Tenant Tenant
	// Class selects the bucket (a cost class such as "default" or
	// "export"). Empty means "default".
	Class string
	// Cost is the number of tokens the request takes. 0 is a peek: it
	// reports the state without charging. Negative is invalid.
	Cost int64
	// Also names more classes of the same tenant, checked and charged
	// together with Class in one script call: either every bucket of every
	// class has Cost tokens and all are charged, or none is. A bucket the
	// classes share (a tenant-wide ceiling) is charged once. The Decision's
	// Buckets hold every bucket; shadow mode applies when it applies to any
	// of the classes. At most MaxClasses classes in all.
	Also []string
}

// MaxClasses is the most classes one Request may name (Class plus Also).
const MaxClasses = 16

// DefaultClass is the class of a request that names none.
const DefaultClass = "default"

// Limiter checks requests against per-tenant token buckets kept in Redis.
// It is safe for concurrent use; create one per process and share it.
type Limiter struct {
	client   redis.UniversalClient
	resolver Resolver
	keys     Keys
	cfg      config
	// scripts is the client the script calls go through, bounded by the
	// timeout (see scriptClient); owned is closed by Close when the limiter
	// opened it.
	scripts  redis.UniversalClient
	owned    io.Closer
	lastLog  atomic.Int64
	breaker  *breaker      // nil: off
	fallback *localBuckets // nil: off
	deny     *denyCache    // nil: off
	metrics  *metrics
	now      func() time.Time
	batch    *batcher // nil: one call per check
	leases   *leases  // nil: no class leases
	args     sync.Map // Quota -> [3]any, see quotaArgs
	nargs    atomic.Int64
}

// New returns a limiter that keeps its buckets in client (any go-redis v9
// client: standalone, Cluster, failover/Sentinel, Ring) and takes quotas from
// r. It makes no network call, so it succeeds while Redis is down.
func New(client redis.UniversalClient, r Resolver, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidConfig)
	}
	if r == nil {
		return nil, fmt.Errorf("%w: nil Resolver", ErrInvalidConfig)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			if err := o.apply(&cfg); err != nil {
				return nil, err
			}
		}
	}
	if cfg.policy > FailClosed {
		return nil, fmt.Errorf("%w: unknown failure policy %d", ErrInvalidConfig, cfg.policy)
	}
	keys, err := NewKeys(cfg.prefix)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, resolver: r, keys: keys, cfg: cfg,
		metrics: newMetrics(cfg.meterProvider, cfg.tenantTopK), now: time.Now}
	l.scripts, l.owned = scriptClient(client)
	if cfg.clock != nil {
		l.now = cfg.clock
	}
	if tr, ok := r.(*TieredResolver); ok {
		tr.boundWait(cfg.timeout) // a first override lookup waits no longer than a check
	}
	if cfg.breakerThreshold > 0 {
		l.breaker = &breaker{threshold: int64(cfg.breakerThreshold), cooldown: cfg.breakerCooldown}
	}
	if cfg.fallbackShare > 0 {
		l.fallback = newLocalBuckets(100_000)
	}
	if cfg.denyCache {
		l.deny = newDenyCache(100_000)
	}
	if len(cfg.leases) > 0 {
		l.leases = newLeases(cfg.leases, 100_000)
	}
	if cfg.batching {
		l.batch = newBatcher(l.scripts, l.metrics.batchSize)
	}
	return l, nil
}

// Close stops the limiter's background work (the batcher) and closes the
// client it opened when the one given to New does not honour context
// deadlines (ContextTimeoutEnabled false; see docs/reliability.md). Checks
// after Close fail by the failure policy. It does not close the Redis
// client given to New.
func (l *Limiter) Close() error {
	if l.batch != nil {
		l.batch.close()
	}
	if l.owned != nil {
		return l.owned.Close()
	}
	return nil
}

// Keys returns the limiter's key scheme.
func (l *Limiter) Keys() Keys { return l.keys }

// FailurePolicy returns the limiter's failure policy.
func (l *Limiter) FailurePolicy() FailurePolicy { return l.cfg.policy }

// Allow checks and charges cost tokens of tenant t's class buckets. See
// [Limiter.Check].
func (l *Limiter) Allow(ctx context.Context, t Tenant, class string, cost int64) (Decision, error) {
	return l.Check(ctx, Request{Tenant: t, Class: class, Cost: cost})
}

// Peek reports the state of tenant t's class buckets without charging them.
func (l *Limiter) Peek(ctx context.Context, t Tenant, class string) (Decision, error) {
	return l.Check(ctx, Request{Tenant: t, Class: class})
}

// Check answers one request. Over quota is not an error: it is a Decision
// with Allowed false. The error is non-nil when the request is invalid
// (wrapping ErrInvalidRequest; the Decision has ReasonInvalid), when its
// quota is not configured (an unknown tier or class, an invalid quota:
// wrapping ErrResolve or ErrInvalidQuota; ReasonUnresolved, not admitted:
// a configuration mistake never turns into unlimited traffic), or when the
// store or a custom resolver's backend failed (wrapping ErrStore; the
// Decision carries the failure policy's answer, ReasonFailedOpen or
// ReasonFailedClosed, or the local fallback's; a Redis error reply about
// this request's own keys, such as WRONGTYPE, is answered so too but never
// counts toward the circuit breaker), or when the caller's context ended
// before the store answered (ReasonCanceled, not admitted, not degraded;
// the error wraps the context's error, not ErrStore). The Decision is
// always usable.
func (l *Limiter) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := l.check(ctx, req)
	if !d.Allowed && d.Denied() && l.shadowed(req) {
		d.Allowed, d.Reason = true, ReasonShadowDenied
	}
	l.metrics.record(ctx, req, d)
	return d, err
}

// shadowed reports whether shadow mode applies to req: to every request, or
// to one of its classes.
func (l *Limiter) shadowed(req Request) bool {
	if l.cfg.shadow || l.cfg.shadowClasses[orDefault(req.Class)] {
		return true
	}
	for _, class := range req.Also {
		if l.cfg.shadowClasses[class] {
			return true
		}
	}
	return false
}

func (l *Limiter) check(ctx context.Context, req Request) (Decision, error) {
	if req.Class == "" {
		req.Class = DefaultClass
	}
	if err := l.validate(req); err != nil {
		return Decision{Reason: ReasonInvalid, Cost: req.Cost}, err
	}
	buckets, err := l.resolver.Buckets(ctx, req.Tenant, req.Class)
	if err == nil {
		err = validateBuckets(buckets)
	}
	// the resolver's slice may be shared: appending must not write into it
	buckets = slices.Clip(buckets)
	for _, class := range req.Also {
		if err != nil {
			break
		}
		var more []Bucket
		if more, err = l.resolver.Buckets(ctx, req.Tenant, class); err == nil {
			err = validateBuckets(more)
		}
		for _, b := range more {
			if !slices.ContainsFunc(buckets, func(have Bucket) bool { return have.Name == b.Name }) {
				buckets = append(buckets, b)
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrResolve) && !errors.Is(err, ErrInvalidQuota) {
			return l.callerGone(req, ctx.Err())
		}
		if errors.Is(err, ErrResolve) || errors.Is(err, ErrInvalidQuota) {
			l.logDegraded("tollgate: no quota configured for this request; rejected", req, err, "tier", EscapeID(req.Tenant.Tier))
			return Decision{Reason: ReasonUnresolved, Cost: req.Cost}, err
		}
		// a custom resolver's own backend failed: a store failure
		err = fmt.Errorf("%w: resolve: %w", ErrStore, err)
		return l.degrade(req, nil, nil, err), err
	}
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		if keys[i], err = l.keys.Bucket(req.Tenant.ID, b.Name); err != nil {
			return Decision{Reason: ReasonInvalid, Cost: req.Cost}, err
		}
	}
	sent := l.now()
	if l.leases != nil && req.Cost > 0 && len(req.Also) == 0 {
		if lc, ok := l.leases.classes[req.Class]; ok {
			return l.checkLeased(ctx, req, keys, buckets, lc, sent)
		}
	}
	if d, ok := l.checkDenyCache(ctx, keys, buckets, req.Cost, sent); ok {
		return d, nil
	}
	return l.store(ctx, req, keys, buckets, req.Cost, sent)
}

// checkDenyCache answers from the deny cache when it proves a denial.
func (l *Limiter) checkDenyCache(ctx context.Context, keys []string, buckets []Bucket, cost int64, now time.Time) (Decision, bool) {
	if l.deny == nil || cost <= 0 {
		return Decision{}, false
	}
	d, ok := l.deny.check(keys, buckets, cost, now)
	if ok {
		d.Local = true
		l.metrics.denyCacheHits.Add(ctx, 1)
	}
	return d, ok
}

// store charges cost tokens (req.Cost, or a lease's size) in the store, or
// degrades when it fails. sent is when the check started.
func (l *Limiter) store(ctx context.Context, req Request, keys []string, buckets []Bucket, cost int64, sent time.Time) (Decision, error) {
	if err := ctx.Err(); err != nil {
		if context.Cause(ctx) == errLimiterTimeout {
			// the limiter's own deadline (a lease wait used it up), not
			// the caller's: the failure policy answers
			err := fmt.Errorf("%w: no answer within %v: %w", ErrStore, l.cfg.timeout, context.DeadlineExceeded)
			return l.degrade(req, keys, buckets, err), err
		}
		return l.callerGone(req, err)
	}
	ok, probe := l.breaker.allow(sent)
	if !ok {
		err := fmt.Errorf("%w: %w", ErrStore, errCircuitOpen)
		l.metrics.storeCall(ctx, 0, err, l.cfg.policy)
		return l.degrade(req, keys, buckets, err), err
	}
	now := ""
	if l.cfg.clock != nil {
		now = strconv.FormatInt(sent.UnixMicro(), 10)
	}
	var one [1][3]any
	quotas := one[:0]
	for _, b := range buckets {
		quotas = append(quotas, l.quotaArgs(b.Quota))
	}
	start := time.Now()
	reply, err := l.run(ctx, scriptArgs(keys, now, cost, quotas))
	var d Decision
	if err == nil {
		if d, err = parseReply(reply, buckets, cost); err != nil {
			err = &requestError{err}
		}
	}
	if err != nil {
		return l.failed(ctx, req, keys, buckets, err, time.Since(start), probe)
	}
	l.metrics.storeCall(ctx, time.Since(start), nil, l.cfg.policy)
	l.breaker.success()
	if l.fallback != nil {
		l.fallback.reset()
	}
	if l.deny != nil && d.Reason == ReasonOverLimit && cost == req.Cost {
		l.deny.remember(keys, d, sent)
	}
	return d, nil
}

// quotaArgs returns a quota's script arguments (capacity, rate, TTL),
// formatted once per quota: quotas are few, checks many.
func (l *Limiter) quotaArgs(q Quota) [3]any {
	if v, ok := l.args.Load(q); ok {
		return v.([3]any)
	}
	a := [3]any{strconv.FormatInt(q.Capacity, 10), strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64), q.ttlMillis()}
	if l.nargs.Load() < maxCachedSets {
		if _, loaded := l.args.LoadOrStore(q, a); !loaded {
			l.nargs.Add(1)
		}
	}
	return a
}

func (l *Limiter) validate(req Request) error {
	if err := validateTenantID(req.Tenant.ID); err != nil {
		return err
	}
	if err := ValidateName(req.Class); err != nil {
		return err
	}
	if req.Cost < 0 || req.Cost > MaxCost {
		return fmt.Errorf("%w: cost must be 0 to %d, got %d", ErrInvalidRequest, int64(MaxCost), req.Cost)
	}
	if len(req.Also) >= MaxClasses {
		return fmt.Errorf("%w: %d classes in one request, more than %d", ErrInvalidRequest, 1+len(req.Also), MaxClasses)
	}
	for _, class := range req.Also {
		if err := ValidateName(class); err != nil {
			return err
		}
	}
	return nil
}

func validateBuckets(bs []Bucket) error {
	if len(bs) == 0 {
		return fmt.Errorf("%w: resolver returned no buckets", ErrResolve)
	}
	for i, b := range bs {
		if err := ValidateName(b.Name); err != nil {
			return fmt.Errorf("%w: bucket %d: %v", ErrResolve, i, err)
		}
		if err := b.Quota.Validate(); err != nil {
			return fmt.Errorf("bucket %q: %w", b.Name, err)
		}
		for _, o := range bs[:i] {
			if o.Name == b.Name {
				return fmt.Errorf("%w: bucket %q appears twice", ErrResolve, b.Name)
			}
		}
	}
	return nil
}

// run calls the script within the limiter's timeout, once (see runScript
// and noRetryCmd), and names a failure for what it was (see storeError).
func (l *Limiter) run(ctx context.Context, args []any) (any, error) {
	call, cancel := context.WithTimeoutCause(ctx, l.cfg.timeout, errLimiterTimeout)
	defer cancel()
	var v any
	var err error
	if l.batch != nil {
		v, err = l.batch.do(call, args)
	} else {
		v, err = runScript(call, l.scripts, args)
	}
	if err != nil {
		err = storeError(ctx, call, l.cfg.timeout, err)
	}
	return v, err
}

// failed answers a check whose store call failed, by what failed. A caller
// gone is no failure: its check is abandoned, not degraded, and nothing is
// counted or logged. A failure of the request's own (an error reply about
// its keys) is answered by the failure policy and logged with its keys, but
// the store answered, so for the breaker it is a success. Only the store's
// own failures count toward the breaker. probe: this call was the breaker's
// probe.
func (l *Limiter) failed(ctx context.Context, req Request, keys []string, buckets []Bucket, err error, took time.Duration, probe bool) (Decision, error) {
	var gone *callerGone
	if errors.As(err, &gone) {
		l.breaker.abandon(probe)
		return Decision{Reason: ReasonCanceled, Cost: req.Cost}, gone
	}
	l.metrics.storeCall(ctx, took, err, l.cfg.policy)
	var re *requestError
	if errors.As(err, &re) {
		l.breaker.success()
		err = fmt.Errorf("%w: %w", ErrStore, err)
		d := l.degradeQuiet(req, keys, buckets)
		l.logDegraded("tollgate: the store refused this request; answered by the failure policy", req, err,
			"decision", outcome(d), "key", strings.Join(keys, " "))
		return d, err
	}
	if l.batch == nil {
		refreshTopology(l.client, err) // the batcher does this itself
	}
	err = fmt.Errorf("%w: %w", ErrStore, err)
	if l.breaker.failure(l.now()) {
		l.logDegraded("tollgate: circuit breaker opened: store calls paused", req, err)
	}
	return l.degrade(req, keys, buckets, err), err
}

// callerGone is the decision of a check whose caller left first.
func (l *Limiter) callerGone(req Request, err error) (Decision, error) {
	return Decision{Reason: ReasonCanceled, Cost: req.Cost}, &callerGone{err}
}

// degrade answers without the store: from the local fallback buckets when
// configured (and the quota is known), else by the failure policy. It logs,
// at most once a second: a degraded decision is never silent.
func (l *Limiter) degrade(req Request, keys []string, buckets []Bucket, err error) Decision {
	d := l.degradeQuiet(req, keys, buckets)
	l.logDegraded("tollgate: rate limit check degraded", req, err, "decision", outcome(d))
	return d
}

// degradeQuiet is degrade's answer, without the log.
func (l *Limiter) degradeQuiet(req Request, keys []string, buckets []Bucket) Decision {
	switch {
	case l.fallback != nil && buckets != nil:
		d := l.fallback.takeShare(keys, buckets, l.cfg.fallbackShare, req.Cost, l.now())
		d.Fallback = true
		return d
	case l.cfg.policy == FailClosed:
		return Decision{Reason: ReasonFailedClosed, Cost: req.Cost}
	}
	return Decision{Reason: ReasonFailedOpen, Allowed: true, Cost: req.Cost}
}

func (l *Limiter) logDegraded(msg string, req Request, err error, attrs ...any) {
	now := time.Now().UnixNano()
	if last := l.lastLog.Load(); now-last >= int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
		attrs = append(attrs, "tenant", EscapeID(req.Tenant.ID), "class", req.Class, "policy", l.cfg.policy.String(), "err", err)
		l.cfg.log.Warn(msg, attrs...)
	}
}

// parseReply decodes the script's reply (see the script's header), checking
// every element's type, and works out what the script leaves to the caller:
// "cost exceeds capacity" and the retry time.
func parseReply(v any, buckets []Bucket, cost int64) (Decision, error) {
	if s, ok := v.(string); ok && len(buckets) == 1 {
		// one bucket: the state after an admission, or the balance after a
		// denial (no space)
		tok, err := parseTokens(s)
		if err != nil {
			return Decision{}, err
		}
		reason := int64(0)
		if strings.IndexByte(s, ' ') < 0 {
			reason = 1
		}
		toks := [1]float64{tok}
		return decide(buckets, toks[:], 0, reason, cost), nil
	}
	a, ok := v.([]any)
	if !ok || len(buckets) < 2 || len(a) != 3+len(buckets) {
		return Decision{}, fmt.Errorf("%w: script reply %T of length %d", errProtocol, v, len(a))
	}
	allowed, ok1 := a[0].(int64)
	reason, ok2 := a[1].(int64)
	binding, ok3 := a[2].(int64)
	if !ok1 || !ok2 || !ok3 || binding < 1 || int(binding) > len(buckets) || reason < 0 || reason > 2 || (allowed == 1) != (reason == 0) {
		return Decision{}, fmt.Errorf("%w: script reply header %v", errProtocol, a[:3])
	}
	toks := make([]float64, len(buckets))
	for i := range buckets {
		s, ok := a[3+i].(string)
		if !ok {
			return Decision{}, fmt.Errorf("%w: script reply element %T, want a string", errProtocol, a[3+i])
		}
		tok, err := parseTokens(s)
		if err != nil {
			return Decision{}, err
		}
		toks[i] = tok
	}
	return decide(buckets, toks, int(binding-1), reason, cost), nil
}

// decide builds the decision from the buckets' balances after the call, the
// binding bucket and the script's reason (0 admitted, else denied; a denial
// by a bucket whose capacity is below the cost is "cost exceeds capacity").
func decide(buckets []Bucket, toks []float64, binding int, reason, cost int64) Decision {
	states := make([]BucketState, len(buckets))
	for i, b := range buckets {
		states[i] = BucketState{Name: b.Name, Quota: b.Quota, Tokens: toks[i]}
	}
	r, retry := ReasonOK, 0.0
	if reason != 0 {
		b := buckets[binding].Quota
		if cost > b.Capacity {
			r = ReasonCostExceedsCapacity
		} else {
			r, retry = ReasonOverLimit, waitFor(b, toks[binding], cost)
		}
	}
	return newDecision(states, binding, r, retry, cost)
}

// parseTokens reads a bucket's balance: a number, possibly followed by a
// space and more (the stored state, which the script replies as is).
func parseTokens(s string) (float64, error) {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: script reply element %q: %w", errProtocol, s, err)
	}
	return f, nil
}

// errProtocol marks a reply the limiter cannot decode.
var errProtocol = errors.New("unexpected reply")

// Reset deletes tenant t's buckets, which then start full, and returns
// how many keys it deleted (0 when the buckets were already full). With
// bucket names it deletes just those; with none, every bucket of the tenant
// (a SCAN over the tenant's keys; on a Cluster, on the one master that holds
// the tenant's slot).
func (l *Limiter) Reset(ctx context.Context, t Tenant, buckets ...string) (int64, error) {
	var keys []string
	for _, b := range buckets {
		k, err := l.keys.Bucket(t.ID, b)
		if err != nil {
			return 0, err
		}
		keys = append(keys, k)
	}
	pattern, err := l.keys.TenantPattern(t.ID)
	if err != nil {
		return 0, err
	}
	if len(buckets) == 0 {
		var node redis.Cmdable = l.client
		if cc, ok := l.client.(*redis.ClusterClient); ok {
			// the pattern's hash tag is the tenant's: every key of the
			// tenant is in its slot, so only that slot's master has them
			m, err := cc.MasterForKey(ctx, pattern)
			if err != nil {
				return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
			}
			node = m
		}
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
		}
	}
	if l.deny != nil {
		l.deny.forget(pattern[:len(pattern)-1])
	}
	if l.leases != nil {
		l.leases.forget(pattern[:len(pattern)-1])
	}
	if len(keys) == 0 {
		return 0, nil
	}
	// one slot, so one DEL is valid on a Cluster too
	n, err := l.client.Del(ctx, keys...).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
	}
	return n, nil
}

func orDefault(class string) string {
	if class == "" {
		return DefaultClass
	}
	return class
}
