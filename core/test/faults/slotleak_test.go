package faults_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestConcurrencyAbandonedChecks: a check of a concurrency-limited class
// whose answer the process did not deliver holds no slot, however late the
// store runs it. Two faults, on a standalone server and on the master of a
// 3-master Cluster holding the tenant's keys, with the default timeout,
// breaker, batching and lease (10 s): Redis stalls (SIGSTOP) for 0.5 s with
// 6 checks in flight, which time out and are answered by the failure
// policy, and Redis runs them when it resumes; a client hangs up (its
// context cancelled) after its check was written, during a 0.3 s stall.
// Either way the tenant's next request is admitted within 1 s after Redis
// resumes, and the limit still holds: exactly N of N+1 requests then get a
// slot.
func TestConcurrencyAbandonedChecks(t *testing.T) {
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			var writes atomic.Int64 // script commands written to any connection
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &watchConn{Conn: c, writes: &writes}, nil
			}
			var c redis.UniversalClient
			var stall func(tenant string) *redistest.Server
			if topo == "standalone" {
				srv := redistest.NewServer(t)
				c = srv.Client(t, func(o *redis.Options) { o.Dialer = dial })
				stall = func(string) *redistest.Server { return srv }
			} else {
				cl := redistest.NewCluster(t, 3, 0)
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: dial, MaxRetries: -1})
				t.Cleanup(func() { _ = cc.Close() })
				c = cc
				stall = func(tenant string) *redistest.Server {
					ks, err := keys.New(redistest.Prefix(t))
					if err != nil {
						t.Fatal(err)
					}
					key, err := ks.Slots(tenant, "reports")
					if err != nil {
						t.Fatal(err)
					}
					m, err := cc.MasterForKey(context.Background(), key)
					if err != nil {
						t.Fatal(err)
					}
					for i := range 3 {
						if s := cl.Master(t, i); s.Addr() == m.Options().Addr {
							return s
						}
					}
					t.Fatalf("no master serves %s", m.Options().Addr)
					return nil
				}
			}
			where := map[string]string{"standalone": "Redis", "cluster": "the Cluster master holding them"}[topo]
			t.Run("stall with 6 in flight", func(t *testing.T) {
				abandoned(t, c, stall, 2, func(t *testing.T, l *core.Limiter, req core.Request, srv *redistest.Server) time.Time {
					var wg sync.WaitGroup
					resumed := pause(t, srv, 500*time.Millisecond, func() {
						for range 6 {
							wg.Add(1)
							go func() {
								defer wg.Done()
								// one still queued in this process when Redis
								// resumes is answered by Redis: it holds its
								// slot as a running request, and ends
								d, _ := l.Check(context.Background(), req)
								d.Slot.Release()
							}()
						}
					})
					// the checks end within their budgets (the timeout, the
					// local queue's) whether or not Redis resumes
					waitGroup(t, &wg, 3*core.DefaultTimeout+2*time.Second, "the checks during the stall")
					return resumed
				})
				record(row{"6 checks of a concurrency class (2 in flight) in flight, " + where + " hung 0.5 s (SIGSTOP)", core.FailOpen,
					"answered without a slot (policy, shed, or Redis once it resumed); their unanswered slots forgotten; the tenant's next request admitted by Redis within 1 s of the resume, and the limit enforced", 0})
			})
			t.Run("client hangs up", func(t *testing.T) {
				abandoned(t, c, stall, 1, func(t *testing.T, l *core.Limiter, req core.Request, srv *redistest.Server) time.Time {
					return pause(t, srv, 300*time.Millisecond, func() {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						before := writes.Load()
						done := make(chan core.Decision, 1)
						go func() {
							d, _ := l.Check(ctx, req)
							done <- d
						}()
						waitUntil(t, 2*time.Second, "the check written to Redis", func() bool { return writes.Load() > before })
						cancel()
						select {
						case d := <-done:
							if d.Reason != core.ReasonCanceled || d.Slot != nil {
								t.Errorf("a check whose caller hung up: %v, slot %v; want canceled without a slot", d.Reason, d.Slot)
							}
						case <-time.After(2 * time.Second):
							t.Fatal("a check whose caller hung up did not return within 2 s")
						}
					})
				})
				record(row{"a check of a concurrency class (1 in flight) whose caller hung up, " + where + " hung 0.3 s (SIGSTOP)", core.FailOpen,
					"canceled without a slot; its slot forgotten; the tenant's next request admitted by Redis within 1 s of the resume, and the limit enforced", 0})
			})
		})
	}
}

// abandoned runs fault against a fresh tenant of a class with concurrency
// limit n on srv (stall picks the server holding the tenant's keys), then
// wants the tenant's next request admitted, and every slot free (n, not
// n+1, requests holding slots at once) within 1 s after Redis resumes.
func abandoned(t *testing.T, c redis.UniversalClient, stall func(tenant string) *redistest.Server, n int64,
	fault func(t *testing.T, l *core.Limiter, req core.Request, srv *redistest.Server) (resumed time.Time)) {
	q := quota.Quota{Capacity: 1000, RefillPerSecond: 100, Concurrency: n}
	r := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: "reports", Quota: q}}, nil
	})
	l, err := core.New(c, r, core.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tenant := "t-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	req := core.Request{Tenant: quota.Tenant{ID: tenant}, Class: "reports", Cost: 1}
	srv := stall(tenant)
	// the script is loaded and the connections are up before the fault
	d, err := l.Check(context.Background(), req)
	if err != nil || d.Slot == nil {
		t.Fatalf("before the fault: %v, %v", d.Reason, err)
	}
	d.Slot.Release()

	resumed := fault(t, l, req, srv)

	// the next request within a second; and within the same second every
	// slot free (n held at once), none more (the n+1st denied)
	const within = time.Second
	var held []*core.Slot
	defer func() {
		for _, s := range held {
			s.Release()
		}
	}()
	var last core.Decision
	var lastErr error
	var seen []string // the answers before each admission, when they change
	for int64(len(held)) < n {
		last, lastErr = l.Check(context.Background(), req)
		if last.Slot != nil {
			held = append(held, last.Slot)
			if len(held) == 1 {
				t.Logf("admitted %v after Redis resumed", time.Since(resumed).Round(time.Millisecond))
			}
			continue
		}
		if r := last.Reason.String(); len(seen) == 0 || seen[len(seen)-1] != r {
			seen = append(seen, r)
			t.Logf("%v after Redis resumed: %v (%v)", time.Since(resumed).Round(time.Millisecond), r, lastErr)
		}
		if time.Since(resumed) > within {
			sk, _ := l.Keys().Slots(tenant, "reports")
			now, _ := c.Time(context.Background()).Result()
			t.Fatalf("%d of %d slots held at once %v after Redis resumed: last %v (%v); slot set at %d: %v", len(held), n, within,
				last.Reason, lastErr, now.UnixMicro(), c.ZRangeWithScores(context.Background(), sk, 0, -1).Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d, err := l.Check(context.Background(), req); d.Reason != core.ReasonConcurrencyLimit {
		d.Slot.Release()
		t.Fatalf("a request with %d held: %v, %v; want a concurrency denial", n, d.Reason, err)
	}
}

// pause stops srv (SIGSTOP), runs during, and resumes it (SIGCONT) long
// after the pause began; it returns when.
func pause(t *testing.T, srv *redistest.Server, long time.Duration, during func()) time.Time {
	t.Helper()
	start := time.Now()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	during()
	time.Sleep(time.Until(start.Add(long))) // the stall's length: the fault itself
	resumed = true
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("%s: not done within %v", what, within)
	}
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// watchConn counts the script commands written through it.
type watchConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *watchConn) Write(b []byte) (int, error) {
	if n := bytes.Count(b, []byte("evalsha")); n > 0 {
		c.writes.Add(int64(n))
	}
	return c.Conn.Write(b)
}

// TestConcurrencyDroppedReply: the check ran in time and took its slot, but
// its reply was lost (the fault proxy forwards the command, drops the reply
// and resets the connection): the check is answered by the failure policy,
// and its slot is forgotten. The forget runs although its own replies are
// dropped too (the store holds no live slot within a second), is retried
// until one gets through (counted as nothing given up), and the tenant is
// admitted once replies flow again. Then, a store that answers nothing
// (blackhole) for longer than the lease: the forget is given up a lease
// after its check and counted (slots.expired, cause release_failed).
func TestConcurrencyDroppedReply(t *testing.T) {
	srv := redistest.NewServer(t)
	proxy := redistest.NewFaultProxy(t, srv.Addr())
	opt, err := redis.ParseURL(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	direct := srv.Client(t)
	const timeout, lease = 200 * time.Millisecond, 1200 * time.Millisecond
	q := quota.Quota{Capacity: 1000, RefillPerSecond: 100, Concurrency: 1}
	// each phase has a limiter of its own, so that its forgets and their
	// count are its own
	newLim := func() (*core.Limiter, func() int64) {
		reader := sdkmetric.NewManualReader()
		l, err := core.New(client, resolver(q), core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(timeout),
			core.WithCircuitBreaker(0, 0), core.WithConcurrencySlots(lease, 0),
			core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		if err != nil {
			t.Fatal(err)
		}
		givenUp := func() (n int64) {
			for _, m := range collectMetrics(t, reader) {
				if m.Name != "tollgate.slots.expired" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if c, _ := dp.Attributes.Value(attribute.Key("cause")); c.AsString() == "release_failed" {
						n += dp.Value
					}
				}
			}
			return n
		}
		return l, givenUp
	}
	ctx := context.Background()
	req := core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "default", Cost: 1}
	l, givenUp := newLim()
	defer l.Close()
	key, err := l.Keys().Slots("t1", "default")
	if err != nil {
		t.Fatal(err)
	}
	live := func() int64 {
		now, err := direct.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return direct.ZCount(ctx, key, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Val()
	}
	admitted := func(l *core.Limiter, after string) {
		t.Helper()
		at := time.Now()
		for {
			d, err := l.Check(ctx, req)
			if d.Slot != nil {
				d.Slot.Release()
				return
			}
			if time.Since(at) > time.Second {
				t.Fatalf("not admitted within 1 s after %s: %v (%v)", after, d.Reason, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	d, err := l.Check(ctx, req)
	if err != nil || d.Slot == nil {
		t.Fatalf("before the fault: %v, %v", d.Reason, err)
	}
	d.Slot.Release()

	proxy.Set(redistest.DropReply)
	d, err = l.Check(ctx, req)
	if d.Reason != core.ReasonFailedOpen || d.Slot != nil {
		t.Fatalf("a check whose reply was dropped: %v (%v), slot %v; want failed open without a slot", d.Reason, err, d.Slot)
	}
	waitUntil(t, time.Second, "the slot of the check whose reply was dropped freed in the store", func() bool { return live() == 0 })
	proxy.Set(redistest.Pass)
	admitted(l, "replies flow again")
	// Close tries a forget still pending once more, and replies flow
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := givenUp(); n != 0 {
		t.Fatalf("%d forgets given up, though the store answered again", n)
	}

	l, givenUp = newLim()
	defer l.Close()
	proxy.Set(redistest.Blackhole)
	start := time.Now()
	if d, err = l.Check(ctx, req); d.Slot != nil {
		t.Fatalf("a check while the store answers nothing: %v with a slot", d.Reason)
	}
	// given up once its lease from the check has run, within a last
	// back-off and attempt (at most a second and a timeout)
	waitUntil(t, lease+time.Second+2*timeout+time.Second, "the forget given up", func() bool { return givenUp() == 1 })
	if took := time.Since(start); took < lease-timeout {
		t.Fatalf("the forget given up %v after its check; want about the lease, %v", took, lease)
	}
	proxy.Set(redistest.Pass)
	admitted(l, "the blackhole")
}
