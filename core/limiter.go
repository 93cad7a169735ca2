package core

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/internal/scriptcall"
	"github.com/tollgate-go/tollgate/core/internal/shard"
	"github.com/tollgate-go/tollgate/core/internal/transport"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Request is one request to check.
type Request struct {
	// Tenant is the verified identity the request is charged to.
	Tenant quota.Tenant
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
	// of the classes. At most 16 classes in all.
	Also []string
	// AlsoCosts, when set, is the cost of each class of Also, in Also's
	// order (Cost stays the cost of Class): it must have Also's length, and
	// every cost must be 0 to quota.MaxCost. The classes are still decided
	// all-or-nothing in one script call: either every bucket has its own
	// class's cost and all are charged, or none is. A bucket two classes
	// share (a tenant-wide ceiling) is charged once, the larger of their
	// costs: a ceiling bounds the request, and a class named twice must not
	// charge it twice, so it is charged as the costliest class that names it
	// (the same rule as for one cost, where a shared bucket is charged Cost
	// once, not once per class). Nil means every class costs Cost.
	//
	// A request whose AlsoCosts differ from Cost is decided only by the
	// store: the deny cache, token leases and the local fallback never
	// answer it (their local balances are kept for one cost per call), so
	// when the store cannot be reached the failure policy answers it. Its
	// Decision states Cost as its cost, and [Limiter.Settle] refuses it.
	AlsoCosts []int64
	// Resolved, when set, holds buckets the caller resolved itself (a
	// gateway answering from the snapshot of its rules it holds, as
	// envoyproxy/ratelimit's DoLimit is given its limits): one entry per
	// class, Class's first and then Also's in order. A non-nil entry is
	// that class's buckets, checked as the resolver's answer would be
	// (quotas validated, names unique); the resolver is asked for a class
	// whose entry is nil. Nil: the resolver answers every class.
	// [Limiter.Settle] asks the resolver, as for any other request, for
	// the quotas in force when it settles.
	Resolved [][]quota.Bucket
}

// mixed reports whether req charges its classes different costs: then only
// the store decides it.
func (req *Request) mixed() bool {
	for _, c := range req.AlsoCosts {
		if c != req.Cost {
			return true
		}
	}
	return false
}

// maxClasses is the most classes one Request may name (Class plus Also).
const maxClasses = 16

// Limiter checks requests against per-tenant token buckets kept in Redis.
// It is safe for concurrent use; create one per process and share it.
type Limiter struct {
	client  redis.UniversalClient
	keys    keys.Keys
	cfg     config
	metrics *metrics
	now     func() time.Time
	log     *degradedLog
	quotas  quotaSource
	store   storeConn
	path    checkPath
	slots   slotState
}

// quotaSource is where the limiter's quotas come from, and the script
// arguments made from them.
type quotaSource struct {
	resolver quota.Resolver
	// tiered is the resolver when it also says why an answer is the tier
	// defaults in place of overrides not loaded in time (a
	// quota.TieredResolver); nil for another resolver
	tiered tieredResolver
	// args is each quota's script arguments, formatted once (the script
	// call's, and Settle's)
	args *scriptcall.QuotaArgs
}

// storeConn is the limiter's way to the store.
type storeConn struct {
	// scripts is the client the script calls go through, bounded by the
	// timeout (see transport.Client); owned is closed by Close when the limiter
	// opened it.
	scripts redis.UniversalClient
	owned   io.Closer
	shards  *shard.Set       // store shards: last answers and breakers
	calls   transport.Caller // a Batcher, or a Direct call per check
	// reservations names the settleable admissions (see Settle)
	reservations struct {
		id   string // random, this limiter's
		next atomic.Uint64
	}
}

// slotState is the concurrency slots held by this process (see Slot).
type slotState struct {
	leaseMicros, ttl string // the lease, formatted for the script
	mu               sync.Mutex
	closed           bool
	closing          chan struct{} // closed by Close
	wg               sync.WaitGroup
	releases         releases
}

// New returns a limiter that keeps its buckets in client (any go-redis v9
// client: standalone, Cluster, failover/Sentinel, Ring) and takes quotas from
// r. It makes no network call, so it succeeds while Redis is down.
func New(client redis.UniversalClient, r quota.Resolver, opts ...Option) (*Limiter, error) {
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
	if !cfg.slotLeaseSet {
		cfg.slotLease = max(defaultSlotLease, 3*cfg.timeout)
	} else if cfg.slotLease < 3*cfg.timeout {
		return nil, badOption("WithConcurrencySlots", "lease %v is shorter than 3 check timeouts (%v): a slot could expire between renewals", cfg.slotLease, 3*cfg.timeout)
	}
	if cfg.policy > FailClosed {
		return nil, fmt.Errorf("%w: unknown failure policy %d", ErrInvalidConfig, cfg.policy)
	}
	ks, err := keys.New(cfg.prefix)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, keys: ks, cfg: cfg, quotas: quotaSource{resolver: r, args: &scriptcall.QuotaArgs{}},
		metrics: newMetrics(cfg.meterProvider, cfg.tenantTopK), now: time.Now, slots: slotState{closing: make(chan struct{})},
		log: &degradedLog{log: cfg.log, policy: cfg.policy.String()}}
	l.slots.leaseMicros, l.slots.ttl = scriptcall.SlotArgs(cfg.slotLease)
	var ctxTimeout time.Duration
	l.store.scripts, l.store.owned, ctxTimeout = transport.Client(client, cfg.timeout)
	l.store.reservations.id = newLimiterID()
	if cfg.clock != nil {
		l.now = cfg.clock
	}
	l.quotas.tiered, _ = r.(tieredResolver)
	l.store.shards = shard.New(cfg.breakerThreshold, cfg.breakerCooldown, cfg.timeout, l.store.scripts, l.now,
		shard.Metrics{Durations: l.metrics.storeDur, Errors: l.metrics.storeErrs, Policy: cfg.policy.String()})
	scripts := transport.Pair(scriptcall.TokenBucket, scriptcall.Concurrency)
	if cfg.batching {
		l.store.calls = transport.NewBatcher(l.store.scripts, scripts, cfg.timeout, ctxTimeout, l.metrics.batches)
	} else {
		l.store.calls = transport.NewDirect(l.store.scripts, scripts, cfg.timeout, ctxTimeout)
	}
	l.stack()
	return l, nil
}

// Close stops the limiter's background work (the batcher, the store
// probes, the renewal of concurrency slots, whose holders' slots it
// releases, waiting at most the check timeout for each) and closes the client it opened for its scripts (for go-redis's
// standalone, failover, Cluster and Ring clients: a copy of the given
// client's options with the check timeout on its sockets; see
// https://github.com/tollgate-go/tollgate/blob/main/docs/reliability.md). Checks after Close fail by the failure policy. It
// does not close the Redis client given to New.
func (l *Limiter) Close() error {
	l.store.calls.Close()
	// the held slots' releases and the unanswered ones' forgets make their
	// last attempts side by side: one store timeout for both
	forgot := make(chan struct{})
	go func() {
		l.path.forgets.Close()
		close(forgot)
	}()
	l.closeSlots()
	<-forgot
	l.store.shards.Close()
	if l.store.owned != nil {
		return l.store.owned.Close()
	}
	return nil
}

// Keys returns the limiter's key scheme.
func (l *Limiter) Keys() keys.Keys { return l.keys }
