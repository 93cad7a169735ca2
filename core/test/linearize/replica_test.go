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
	// Skew is this replica's clock offset for the seeded client-clock
	// client
	Skew time.Duration
}

// decider is the client under test: it checks one request of tenant.
type decider interface {
	decide(ctx context.Context, tenant string, cost int64) op
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
				cost := 1 + rng.Int64N(2)
				before := clk.off.Load()
				o := d.decide(context.Background(), tenant, cost)
				after := clk.off.Load()
				o.Replica, o.Client, o.Key, o.Cost = cfg.ID, g, tenant, cost
				o.OffLo, o.OffHi = min(before, after), max(before, after)
				mine = append(mine, o)
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
	lim   *core.Limiter
	lease int64
}

func newDecider(cfg config, uc redis.UniversalClient, clk *clock) (decider, error) {
	if cfg.Client != "limiter" {
		return newSeeded(cfg, uc)
	}
	q := tgquota.Quota{Capacity: cfg.Capacity, RefillPerSecond: cfg.Rate}
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
	lim, err := core.New(uc, tgquota.ResolverFunc(func(context.Context, tgquota.Tenant, string) ([]tgquota.Bucket, error) {
		return []tgquota.Bucket{{Name: tgquota.DefaultClass, Quota: q}}, nil
	}), opts...)
	if err != nil {
		return nil, err
	}
	return &limiterDecider{lim: lim, lease: cfg.Lease}, nil
}

// leaseTTL is how long a lease's tokens may be spent.
const leaseTTL = 100 * time.Millisecond

func (l *limiterDecider) close() { _ = l.lim.Close() }

func (l *limiterDecider) decide(ctx context.Context, tenant string, cost int64) op {
	o := op{Call: time.Now().UnixNano(), Lease: l.lease}
	d, err := l.lim.Check(ctx, core.Request{Tenant: tgquota.Tenant{ID: tenant}, Cost: cost})
	o.Return = time.Now().UnixNano()
	o.Reason, o.Allowed, o.Fallback = d.Reason.String(), d.Allowed, d.Fallback
	switch {
	case err == nil && d.Local && d.Reason == core.ReasonOverLimit:
		o.Kind = localDenied
	case err == nil && d.Local && d.Reason == core.ReasonOK:
		o.Kind = leased
	case err == nil && d.Reason == core.ReasonOK:
		o.Kind, o.Tokens = admitted, d.Buckets[0].Tokens
		o.Stamp = d.Buckets[0].Stamp.UnixMicro()
	case err == nil && d.Reason == core.ReasonOverLimit:
		o.Kind, o.Tokens = denied, d.Buckets[0].Tokens
	default:
		o.Kind = ambiguous
		// the store was not called: the circuit was open, or no connection
		// could be made
		o.NotSent = err != nil && notSent(err)
	}
	return o
}

// notSent reports a store error that says the command never left: the
// circuit was open, or the dial was refused.
func notSent(err error) bool {
	m := err.Error()
	return strings.Contains(m, "store not called") || strings.Contains(m, "connect: connection refused")
}
