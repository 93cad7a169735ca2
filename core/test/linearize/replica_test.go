package linearize_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	tgquota "github.com/tollgate-go/tollgate/core/quota"
)

// replicaEnv holds a replica's configuration (JSON) in its environment: the
// test binary re-executed with it runs as a replica instead of the tests.
const replicaEnv = "TOLLGATE_LINEARIZE_REPLICA"

// config is one replica's configuration.
type config struct {
	ID         int
	Goroutines int
	Addrs      []string // one address, or a Cluster's nodes
	Cluster    bool
	// Remap maps each Cluster node's address to its fault proxy's: every
	// connection, to a seed or to a node the cluster names, is dialled
	// through it
	Remap    map[string]string
	Prefix   string
	Tenants  []string
	Capacity int64
	Rate     float64
	Timeout  time.Duration
	// the limiter's options
	Policy      core.FailurePolicy
	Fallback    float64
	DenyCache   bool
	Batching    bool
	ClientClock bool
	Lease       int64 // lease size, 0 for none; their ttl is leaseTTL
	// Client is the client under test: "limiter", or a seeded broken one
	// (see seeded_test.go)
	Client string
	// Control: a seeded client runs the limiter's scripts unbroken (its
	// histories must pass: what catches the broken one is the bug)
	Control bool
	// Skew is this replica's clock offset for the seeded client-clock
	// client
	Skew time.Duration
	// Mix is the operations the goroutines run: "" single-bucket checks;
	// "multi" checks of class a, class b or both in one request (the same
	// cost, or each its own: Request.AlsoCosts); "slots" checks of a class
	// with a concurrency limit, each admitted one held a moment and
	// released; "settle" checks, half of the admitted ones settled at
	// another actual cost (a charge or a refund); "all" the three at once
	// (class a with the concurrency limit); "reserve" checks and, half of
	// the requests, reservations (Limiter.Reserve) of a max wait of
	// reserveWait
	Mix string
	// AlsoCapacity and AlsoRate are class b's quota (Mix "multi")
	AlsoCapacity int64
	AlsoRate     float64
	// Concurrency is the class's concurrency limit (Mix "slots")
	Concurrency int64
}

// quotas is the model's view of cfg's buckets.
func (cfg config) quotas() quotas {
	q := quotas{b: [nb]quota{{capacity: float64(cfg.Capacity), rate: cfg.Rate},
		{capacity: float64(cfg.AlsoCapacity), rate: cfg.AlsoRate}}, slots: cfg.Concurrency}
	if cfg.DenyCache {
		q.denyAge = cfg.Timeout.Microseconds()
	}
	return q
}

// classB is the second class of Mix "multi".
const classB = "b"

// decider is the client under test: it runs one request of tenant (a
// check, and what follows it in cfg's mix: a settle, a slot's release),
// choosing its costs with rng, and returns its operations.
type decider interface {
	decide(ctx context.Context, tenant string, rng *rand.Rand) []op
	close()
}

// clock is a replica's clock: the system clock plus an offset that the
// parent steps (client-clock mode). The offset is read before and after
// every call, so the call's window in this clock is known.
type clock struct{ off atomic.Int64 } // µs

func (c *clock) now() time.Time {
	return time.Now().Add(time.Duration(c.off.Load()) * time.Microsecond)
}

// runReplica is a replica's main: it checks continuously from cfg's
// goroutines until its stdin says "stop", obeys "step <duration>" (its
// clock jumps), then writes its history to stdout as JSON.
func runReplica(raw string) error {
	var cfg config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return err
	}
	var uc redis.UniversalClient
	if cfg.Cluster {
		o := &redis.ClusterOptions{Addrs: cfg.Addrs}
		if len(cfg.Remap) > 0 {
			var d net.Dialer
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				to, ok := cfg.Remap[addr]
				if !ok {
					return nil, fmt.Errorf("no fault proxy for node %s", addr)
				}
				return d.DialContext(ctx, network, to)
			}
		}
		uc = redis.NewClusterClient(o)
	} else {
		uc = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0]})
	}
	defer uc.Close()
	clk := &clock{}
	d, err := newDecider(cfg, uc, clk)
	if err != nil {
		return err
	}
	defer d.close()

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		history []op
	)
	fmt.Println("ready")
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cfg.ID), uint64(g)))
			var mine []op
			for !stop.Load() {
				tenant := cfg.Tenants[rng.IntN(len(cfg.Tenants))]
				before := clk.off.Load()
				ops := d.decide(context.Background(), tenant, rng)
				after := clk.off.Load()
				for _, o := range ops {
					o.Replica, o.Client, o.Key = cfg.ID, g, tenant
					o.OffLo, o.OffHi = min(before, after), max(before, after)
					mine = append(mine, o)
				}
				// a client's pause between requests (0 to 2 ms): 24 goroutines
				// still contend for every token, and the histories stay
				// small enough to check in seconds
				time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
			}
			mu.Lock()
			history = append(history, mine...)
			mu.Unlock()
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		line := in.Text()
		if line == "stop" {
			break
		}
		if s, ok := strings.CutPrefix(line, "step "); ok {
			dur, err := time.ParseDuration(s)
			if err != nil {
				return err
			}
			clk.off.Add(dur.Microseconds())
		}
	}
	stop.Store(true)
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(history)
}

// limiterDecider is the real limiter.
type limiterDecider struct {
	lim *core.Limiter
	cfg config
}

func newDecider(cfg config, uc redis.UniversalClient, clk *clock) (decider, error) {
	if cfg.Client != "limiter" {
		return newSeeded(cfg, uc, clk)
	}
	lim, err := newLimiter(cfg, uc, clk)
	if err != nil {
		return nil, err
	}
	return &limiterDecider{lim: lim, cfg: cfg}, nil
}

// newLimiter is the limiter of cfg: class "default" (and class b, and a
// concurrency limit, as cfg's mix needs).
func newLimiter(cfg config, uc redis.UniversalClient, clk *clock) (*core.Limiter, error) {
	q := tgquota.Quota{Capacity: cfg.Capacity, RefillPerSecond: cfg.Rate, Concurrency: cfg.Concurrency}
	qb := tgquota.Quota{Capacity: cfg.AlsoCapacity, RefillPerSecond: cfg.AlsoRate}
	opts := []core.Option{core.WithPrefix(cfg.Prefix), core.WithFailurePolicy(cfg.Policy),
		core.WithTimeout(cfg.Timeout), core.WithDenyCache(cfg.DenyCache), core.WithBatching(cfg.Batching)}
	if cfg.Lease > 0 {
		opts = append(opts, core.WithLeases(tgquota.DefaultClass, cfg.Lease, leaseTTL))
	}
	if cfg.Fallback > 0 {
		opts = append(opts, core.WithLocalFallback(cfg.Fallback))
	}
	if cfg.ClientClock {
		opts = append(opts, core.WithClock(clk.now))
	}
	return core.New(uc, tgquota.ResolverFunc(func(_ context.Context, _ tgquota.Tenant, class string) ([]tgquota.Bucket, error) {
		if class == classB {
			return []tgquota.Bucket{{Name: classB, Quota: qb}}, nil
		}
		return []tgquota.Bucket{{Name: tgquota.DefaultClass, Quota: q}}, nil
	}), opts...)
}

// leaseTTL is how long a lease's tokens may be spent.
const leaseTTL = 100 * time.Millisecond

func (l *limiterDecider) close() { _ = l.lim.Close() }

func (l *limiterDecider) decide(ctx context.Context, tenant string, rng *rand.Rand) []op {
	t := tgquota.Tenant{ID: tenant}
	cost := 1 + rng.Int64N(2)
	req := core.Request{Tenant: t, Cost: cost}
	if l.cfg.Mix == "multi" || l.cfg.Mix == "all" {
		switch rng.IntN(4) {
		case 0: // class b alone
			req.Class = classB
		case 1: // both, one cost
			req.Also = []string{classB}
		case 2: // both, each its own cost
			req.Also, req.AlsoCosts = []string{classB}, []int64{3 - cost}
		}
	}
	if l.cfg.Mix == "reserve" && rng.IntN(2) == 0 {
		return reserveOnce(ctx, l.lim, req, rng)
	}
	o, d := checkOnce(ctx, l.lim, req, l.cfg.Lease)
	// class a carries the concurrency limit
	o.Slot = l.cfg.Concurrency > 0 && o.Cost > 0
	if o.Slot {
		o.Lease = 0 // a check that takes a slot is never leased
	}
	ops := []op{o}
	settle := l.cfg.Mix == "settle" || l.cfg.Mix == "all"
	// Settle refuses a decision of classes that cost differently
	if settle && o.Kind == admitted && (o.Cost == 0 || o.AlsoCost == 0 || o.Cost == o.AlsoCost) && rng.IntN(2) == 0 {
		if actual := actualCost(rng, l.cfg); actual != cost {
			s := op{Kind: settled, Cost: o.Cost, AlsoCost: o.AlsoCost, Delta: actual - cost, Call: time.Now().UnixNano()}
			f, err := l.lim.Settle(ctx, t, d, actual)
			s.Return = time.Now().UnixNano()
			s.Forgiven = f
			if err != nil {
				s.Kind, s.Reason = settleFailed, "error"
			}
			ops = append(ops, s)
		}
	}
	if d.Slot != nil {
		// held a moment (0 to 3 ms), then released: Release returns once
		// the store answered, or after one attempt (the release is then
		// retried in the background)
		time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
		r := op{Kind: released, Slot: true, Call: time.Now().UnixNano()}
		d.Slot.Release()
		r.Return = time.Now().UnixNano()
		ops = append(ops, r)
	}
	return ops
}

// checkOnce records one check by lim of req (its class "default", or class b
// alone, or both) as an op.
func checkOnce(ctx context.Context, lim *core.Limiter, req core.Request, lease int64) (op, core.Decision) {
	o := op{Call: time.Now().UnixNano(), Lease: lease}
	d, err := lim.Check(ctx, req)
	o.Return = time.Now().UnixNano()
	o.Reason, o.Allowed, o.Fallback = d.Reason.String(), d.Allowed, d.Fallback
	o.Cost = req.Cost
	if len(req.Also) > 0 {
		o.AlsoCost = req.Cost
		if req.AlsoCosts != nil {
			o.AlsoCost = req.AlsoCosts[0]
		}
	}
	if req.Class == classB {
		o.Cost, o.AlsoCost = 0, req.Cost
	}
	if len(req.Also) > 0 || req.Class == classB {
		o.Lease = 0 // only class a's checks alone are leased
	}
	// each bucket's balance and stamp, by name
	state := func() {
		for _, b := range d.Buckets {
			if b.Name == classB {
				o.AlsoTokens, o.AlsoStamp = b.Tokens, b.Stamp.UnixMicro()
			} else {
				o.Tokens, o.Stamp = b.Tokens, b.Stamp.UnixMicro()
				o.Held = b.InFlight
			}
		}
	}
	switch {
	case err == nil && d.Local && d.Reason == core.ReasonOverLimit:
		o.Kind = localDenied
	case err == nil && d.Local && d.Reason == core.ReasonOK:
		o.Kind = leased
	case err == nil && d.Reason == core.ReasonOK:
		o.Kind = admitted
		state()
	case err == nil && d.Reason == core.ReasonOverLimit:
		o.Kind = denied
		state()
		o.Stamp, o.AlsoStamp = 0, 0
	case err == nil && d.Reason == core.ReasonConcurrencyLimit:
		o.Kind = slotDenied
		state()
		o.Stamp, o.AlsoStamp = 0, 0
	default:
		o.Kind = ambiguous
		// the store was not called: the circuit was open, or no connection
		// could be made
		o.NotSent = err != nil && notSent(err)
	}
	return o, d
}

// reserveWait is the max wait of the reservations of Mix "reserve": at
// the test quota's rate, 4 tokens of debt at most.
const reserveWait = 20 * time.Millisecond

// reserveOnce records one reservation by lim of req (class "default") as
// an op, and cancels one granted reservation in four at once. The caller
// does not wait for its time: the model follows the bucket, which the
// reservation charged when granted.
func reserveOnce(ctx context.Context, lim *core.Limiter, req core.Request, rng *rand.Rand) []op {
	o := op{Call: time.Now().UnixNano(), Cost: req.Cost, MaxWait: reserveWait.Microseconds()}
	r, err := lim.Reserve(ctx, req, reserveWait)
	o.Return = time.Now().UnixNano()
	d := r.Decision
	o.Reason, o.Allowed, o.Fallback = d.Reason.String(), d.Allowed, d.Fallback
	state := func() {
		for _, b := range d.Buckets {
			o.Tokens, o.Stamp = b.Tokens, b.Stamp.UnixMicro()
		}
	}
	switch {
	case err == nil && d.Reason == core.ReasonOK:
		o.Kind = reserved
		state()
	case err == nil && d.Reason == core.ReasonOverLimit:
		o.Kind = reserveDenied
		state()
		o.Stamp = 0
	default:
		o.Kind = reserveFailed
		o.NotSent = err != nil && notSent(err)
	}
	if o.Kind != reserved || rng.IntN(4) != 0 {
		return []op{o}
	}
	c := op{Kind: cancelled, Cost: req.Cost, Call: time.Now().UnixNano()}
	_ = r.Cancel(ctx) // a failed cancel gave back nothing, or its lost reply some
	c.Return = time.Now().UnixNano()
	return []op{o, c}
}

// notSent reports a store error that says the command never left: the
// circuit was open, or the dial was refused.
func notSent(err error) bool {
	m := err.Error()
	return strings.Contains(m, "store not called") || strings.Contains(m, "connect: connection refused")
}

// actualCost is a settle's actual cost: 0 to 5, or one time in eight three
// capacities (a debt past any floor: what is forgiven, or carried, shows).
func actualCost(rng *rand.Rand, cfg config) int64 {
	if rng.IntN(8) == 0 {
		return 3 * cfg.Capacity
	}
	return rng.Int64N(6)
}
