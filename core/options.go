package core

import (
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/lease"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
)

// FailurePolicy says what a check answers when the store fails.
type FailurePolicy uint8

const (
	// FailOpen lets requests through unchecked while the store fails
	// (Decision.Reason = ReasonFailedOpen). Availability over enforcement.
	FailOpen FailurePolicy = iota
	// FailClosed rejects requests while the store fails
	// (ReasonFailedClosed: HTTP 503, gRPC Unavailable; never 429).
	FailClosed
)

// String returns "open" or "closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "closed"
	}
	return "open"
}

// DefaultPrefix is the key prefix used unless [WithPrefix] says otherwise.
const DefaultPrefix = "rl"

// DefaultTimeout bounds one check's store call.
const DefaultTimeout = 100 * time.Millisecond

// Option configures a Limiter. An option given a value it cannot use makes
// New fail with an error that names the option and wraps ErrInvalidConfig;
// nil (a logger, a meter provider, a clock) means the default.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

func badOption(option, format string, args ...any) error {
	return errs.BadOption(option, format, args...)
}

func badValue(option string, err error) error { return errs.BadValue(option, err) }

type config struct {
	prefix  string
	policy  FailurePolicy
	timeout time.Duration
	clock   func() time.Time // nil: server clock (TIME)
	shadow  bool
	// shadowClasses: classes in shadow mode while the rest enforce
	shadowClasses map[string]bool
	log           *slog.Logger

	breakerThreshold int
	breakerCooldown  time.Duration
	fallbackShare    float64 // 0: no local fallback
	denyCache        bool
	meterProvider    metric.MeterProvider
	tenantTopK       int
	batching         bool
	leases           map[string]lease.Class // by class; nil: none
	slotLease        time.Duration
	slotLeaseSet     bool
	slotRetry        time.Duration // 0: until the earliest deadline
	slotGroup        string        // "": none (WithSlotGroup)
	settleWindow     time.Duration // how long a reservation may be settled
	maxWait          time.Duration // Wait's without a deadline, when maxWaitSet (WithMaxWait)
	maxWaitSet       bool
}

// defaultSettleWindow is WithSettleWindow's default.
const defaultSettleWindow = 10 * time.Minute

func defaultConfig() config {
	return config{prefix: DefaultPrefix, policy: FailOpen, timeout: DefaultTimeout, log: slog.Default(),
		breakerThreshold: defaultBreakerThreshold, breakerCooldown: defaultBreakerCooldown,
		batching: true, slotRetry: defaultSlotRetry, settleWindow: defaultSettleWindow}
}

// WithConcurrencySlots sets the lease of concurrency slots (Quota.Concurrency)
// and the retry hint of a request denied for lack of one.
//
// lease is how long a slot outlives its holder's last renewal: a held slot
// is renewed every lease/3, so a replica that dies (kill -9, a lost
// network) holds its slots for at most lease. It must be at least three
// check timeouts (WithTimeout) and at most an hour. Default: 10 s, or three
// check timeouts if that is longer.
//
// retryAfter is the denial's RetryAfter (Retry-After, gRPC pushback) when
// sooner than the earliest slot's deadline, which renewal keeps about a
// lease away; 0 reports the deadline itself. It must be from 0 to lease.
// Default 1 s.
func WithConcurrencySlots(lease, retryAfter time.Duration) Option {
	return optionFunc(func(c *config) error {
		if lease <= 0 || lease > time.Hour {
			return badOption("WithConcurrencySlots", "lease must be above 0 and at most 1h, got %v", lease)
		}
		if retryAfter < 0 || retryAfter > lease {
			return badOption("WithConcurrencySlots", "retryAfter must be from 0 to the lease %v, got %v", lease, retryAfter)
		}
		c.slotLease, c.slotLeaseSet, c.slotRetry = lease, true, retryAfter
		return nil
	})
}

// WithSlotGroup marks the concurrency slots this limiter takes as the
// group's: a caller that sees a request's start and end as two calls that
// may reach different processes, as a gateway's hit and negative hit
// (tollgate-rls), frees any slot of its group with [Limiter.ReleaseAny].
// Every process of the group must name it alike; no other caller's slot
// (a service's, in the same bucket) is ever freed so. name is 1 to 64
// letters, digits, '_', '-' or '.' (quota.ValidateName). Default: none.
func WithSlotGroup(name string) Option {
	return optionFunc(func(c *config) error {
		if err := quota.ValidateName(name); err != nil {
			return badValue("WithSlotGroup", err)
		}
		c.slotGroup = name
		return nil
	})
}

// WithCircuitBreaker sets the circuit breaker: after threshold consecutive
// store failures the limiter stops calling the store for cooldown (every
// check answers by the failure policy at once), then lets one probe through;
// a success closes the circuit. threshold 0 turns it off (cooldown is then
// not used); otherwise cooldown must be positive. Default 5 failures, 1 s.
func WithCircuitBreaker(threshold int, cooldown time.Duration) Option {
	return optionFunc(func(c *config) error {
		if threshold < 0 {
			return badOption("WithCircuitBreaker", "threshold must be >= 0, got %d", threshold)
		}
		c.breakerThreshold = threshold
		if threshold == 0 {
			return nil
		}
		if cooldown <= 0 {
			return badOption("WithCircuitBreaker", "cooldown must be positive, got %v", cooldown)
		}
		c.breakerCooldown = cooldown
		return nil
	})
}

// WithLocalFallback answers from in-process token buckets while the store
// fails, instead of failing open or closed: each bucket gets share of its
// quota (capacity and rate times share, capacity at least 1), e.g. 1/N for N
// replicas. Decisions made so have Fallback set and still return the store
// error. share must be in (0, 1]. Default off.
func WithLocalFallback(share float64) Option {
	return optionFunc(func(c *config) error {
		if !(share > 0 && share <= 1) || math.IsNaN(share) {
			return badOption("WithLocalFallback", "share must be in (0,1], got %v", share)
		}
		c.fallbackShare = share
		return nil
	})
}

// WithDenyCache turns on the deny cache: after a denial the limiter
// knows an upper bound on each bucket's tokens (the balance the store
// reported plus the refill since; other replicas' checks can only lower
// it), and denies locally, without a store call, while that bound is below
// the cost and for less than the check timeout (WithTimeout) after the
// denied request was sent; then the store is asked again. It never admits
// what the store would deny. It may deny what the store would admit only
// for tokens that a refund (Limiter.Settle with an actual cost below the
// estimate, by any replica) or a Reset by another process (e.g. the
// tollgate CLI) put back: a check sent a check timeout or more after that
// refund or Reset returned (on this limiter's clock) is never denied for
// lack of them (this limiter's own Reset, and its own refund of the bucket
// set it checks, clear its entry at once); and, in client-clock mode
// (WithClock), while this replica's clock is behind the time another
// replica stored with the bucket: the store then refills nothing for this
// replica's requests, so a denial's balance can be older than the request
// by up to that lag, and the cache may deny up to lag × rate tokens the
// store still holds. A quota change is seen at once. Its cost is a map
// lookup per check; a flood from one denied tenant makes at most one store
// call per check timeout, none while the bound and the timeout allow
// (https://github.com/tollgate-go/tollgate/blob/main/docs/benchmarks.md#what-the-options-change).
// Default off, although it
// wins wherever denials repeat and costs nothing measurable elsewhere:
// turning it on changes two observable behaviours, so it is a choice to make
// (a tenant known to be over its limit keeps being denied while the store
// is down, for up to a check timeout, rather than answered by the failure
// policy; a refund or Reset by another replica or process is seen up to a
// check timeout late).
func WithDenyCache(on bool) Option {
	return optionFunc(func(c *config) error { c.denyCache = on; return nil })
}

// WithLeases turns on token leases for class: a check of that class that
// finds no local lease may take a lease, several tokens charged to the
// store in one script call, and keep what its own request did not use, to
// spend locally, without store calls, for ttl. size is the largest lease
// (at most the smallest capacity of the class's buckets). Each replica
// sizes its next lease of a tenant's buckets from its own demand and the
// bucket's level: its rate of checks of them since its last lease times
// ttl, rounded, at least 2, at most size, and at most half the balance
// the store last reported to it (plus the refill since). A tenant's first
// check on a replica, a check whose lease would serve itself alone (at
// most one check per ttl), and a check whose lease would come to fewer
// than 2 tokens (a bucket near empty) are plain store checks. So a hot tenant far from
// its limit takes leases of size, a quiet one takes small leases or none,
// and near the limit every check goes to the store. Each replica holds at
// most one lease per tenant and class.
//
// Accuracy: the store never admits more than capacity + rate × elapsed, so
// neither do leases in total; but leased tokens are spent later than they
// were charged, so admissions in a window can exceed the bucket's
// allowance for that window by at most the unspent leased tokens across
// replicas: at most replicas × the current lease size, which is at most
// size and at most half the balance the store last reported. Unused tokens
// are not refunded (a refund would cost a store call per lease): they are
// lost when the lease expires, at most one lease per replica per ttl, and
// a lease sized by demand leaves few unspent. Decisions answered from a
// lease have Local set; their Remaining counts the store's balance plus
// the lease's unspent tokens. Peeks (cost 0) and requests costing more than
// size always go to the store. Reset drops this replica's leases for the
// tenant, not other replicas'. size must be at least 2 and ttl positive;
// the empty class means quota.DefaultClass. Default: no leases.
func WithLeases(class string, size int64, ttl time.Duration) Option {
	return optionFunc(func(c *config) error {
		if class == "" {
			class = quota.DefaultClass
		}
		if err := quota.ValidateName(class); err != nil {
			return errs.BadPart("WithLeases", "class ", err)
		}
		if size < 2 {
			return badOption("WithLeases", "size must be at least 2, got %d", size)
		}
		if ttl <= 0 {
			return badOption("WithLeases", "ttl must be positive, got %v", ttl)
		}
		if c.leases == nil {
			c.leases = map[string]lease.Class{}
		}
		c.leases[class] = lease.Class{Size: size, TTL: ttl}
		return nil
	})
}

// WithMeterProvider sets the OpenTelemetry meter provider for the limiter's
// metrics (https://github.com/tollgate-go/tollgate/blob/main/docs/observability.md lists them). Default: the
// global provider (otel.GetMeterProvider), a no-op unless one is installed.
// nil is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) error {
		if mp != nil {
			c.meterProvider = mp
		}
		return nil
	})
}

// WithTenantLabel adds a tenant label to the decisions metric, bounded to
// the first k heavy hitters by denials (the rest are labelled "_other"), so its
// cardinality is at most k+1 whatever the number of tenants. k 0 turns it
// off; k must not be negative. Default off.
func WithTenantLabel(k int) Option {
	return optionFunc(func(c *config) error {
		if k < 0 {
			return badOption("WithTenantLabel", "k must be >= 0, got %d", k)
		}
		c.tenantTopK = k
		return nil
	})
}

// WithPrefix sets the key prefix. Default "rl". See [Keys].
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if _, err := keys.New(prefix); err != nil {
			return badValue("WithPrefix", err)
		}
		c.prefix = prefix
		return nil
	})
}

// WithFailurePolicy sets what a check answers when the store fails. Default
// FailOpen.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(c *config) error {
		if p > FailClosed {
			return badOption("WithFailurePolicy", "unknown failure policy %d", p)
		}
		c.policy = p
		return nil
	})
}

// WithSettleWindow sets how long after its admission a reservation may be
// settled (Limiter.Settle): a settle is applied once, however often it is
// repeated, because the store marks the reservation settled until the
// window ends. The mark is one key of about 150 bytes per settle that
// changed the charge, living at most the window: keep the window no longer
// than your longest request plus its retries. A settle after the window is
// refused. d must be 1 s to 24 h. Default: 10 minutes.
func WithSettleWindow(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < time.Second || d > 24*time.Hour {
			return errs.BadOption("WithSettleWindow", "the window must be 1s to 24h, got %v", d)
		}
		c.settleWindow = d
		return nil
	})
}

// WithTimeout bounds each check's store call; d must be positive. Default
// 100 ms. The bound holds even for a client without ContextTimeoutEnabled,
// without a goroutine per check: the limiter then sends its scripts through
// a client of its own, built from the same options with
// ContextTimeoutEnabled set (see Limiter.Close and
// https://github.com/tollgate-go/tollgate/blob/main/docs/reliability.md).
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error { return errs.SetPositive(&c.timeout, "WithTimeout", "timeout", d) })
}

type clockOption func() time.Time

func (now clockOption) apply(c *config) error {
	if now != nil {
		c.clock = now
	}
	return nil
}

// WithClock takes the time from now instead of the system clock, and makes
// the script take it from now instead of calling TIME on the server: use it
// in tests and simulations (the gate and the Envoy server built over the
// limiter read it too, see Limiter.Now; pass the same clock to
// quota.WithClock to run a resolver on it), and in production
// only for a managed Redis that forbids TIME in scripts
// (WithClock(time.Now)); replicas whose clocks disagree then see slightly
// different buckets. A clock that steps backwards neither mints nor burns
// tokens. nil is ignored. Default: the Redis server's clock.
func WithClock(now func() time.Time) Option { return clockOption(now) }

// WithShadow turns on shadow (dry-run) mode: decisions are computed,
// charged and reported as usual, but a request that would be denied is let
// through with ReasonShadowDenied. Default off.
func WithShadow(on bool) Option {
	return optionFunc(func(c *config) error { c.shadow = on; return nil })
}

// WithShadowClasses puts only the named classes in shadow mode: their would-be
// denials are let through as ReasonShadowDenied (and counted), while every
// other class is enforced. Use it to roll out a new or tighter class limit
// safely. It adds to earlier calls; WithShadow(true) shadows every class.
// Default: none.
func WithShadowClasses(classes ...string) Option {
	return optionFunc(func(c *config) error {
		for _, cl := range classes {
			if err := quota.ValidateName(cl); err != nil {
				return badValue("WithShadowClasses", err)
			}
		}
		if c.shadowClasses == nil {
			c.shadowClasses = map[string]bool{}
		}
		for _, cl := range classes {
			c.shadowClasses[cl] = true
		}
		return nil
	})
}

// WithLogger sets the logger for degraded decisions. Default slog.Default();
// nil is ignored.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l != nil {
			c.log = l
		}
		return nil
	})
}

// WithBatching coalesces concurrent checks into pipelined round trips: no
// dispatcher goroutine and no added wait (a check that finds a free slot
// sends at once; a lone check is a plain call), two pipelines in flight,
// Cluster-aware through the client. Against one call per check it ties at
// one caller and wins from 16 callers up, in throughput and in the store's
// CPU per check (measured in
// https://github.com/tollgate-go/tollgate/blob/main/docs/benchmarks.md#what-the-options-change).
// Close waits for the batches in flight. Default on.
func WithBatching(on bool) Option {
	return optionFunc(func(c *config) error { c.batching = on; return nil })
}
