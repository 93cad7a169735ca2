package faults_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// storeErrors reads the store-errors counter, by kind.
func storeErrors(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range collectMetrics(t, r) {
		if m.Name != "tollgate.store.errors" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			kind, _ := dp.Attributes.Value(attribute.Key("kind"))
			out[kind.AsString()] += dp.Value
		}
	}
	return out
}

// largestBatch reads the largest pipelined batch recorded.
func largestBatch(t *testing.T, r *sdkmetric.ManualReader) int64 {
	t.Helper()
	var largest int64
	for _, m := range collectMetrics(t, r) {
		if m.Name != "tollgate.batch.size" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
			if v, ok := dp.Max.Value(); ok && v > largest {
				largest = v
			}
		}
	}
	return largest
}

func collectMetrics(t *testing.T, r *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var ms []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		ms = append(ms, sm.Metrics...)
	}
	return ms
}

// fixedClock is a client clock that does not move: no refill, so a
// tenant's decisions depend only on what it was charged.
func fixedClock() func() time.Time {
	now := time.Now()
	return func() time.Time { return now }
}

// remaining reads a tenant's balance back from Redis (a peek: no charge).
func remaining(t *testing.T, lim *core.Limiter, tenant string) int64 {
	t.Helper()
	d, err := lim.Peek(context.Background(), quota.Tenant{ID: tenant}, "default")
	if err != nil || d.Reason != core.ReasonOK {
		t.Fatalf("read back %s: %+v, %v", tenant, d, err)
	}
	return d.Remaining
}

type verdict struct {
	allowed   bool
	reason    core.Reason
	remaining int64
}

// TestCallerStorm: 10,000 checks whose callers are gone (cancelled, already
// expired, or expiring during the round trip, like gRPC's grpc-timeout: 50u)
// interleaved with a victim tenant's traffic change nothing for the victim:
// its decisions are those of a run without the storm, the breaker stays
// closed and no store error is counted.
func TestCallerStorm(t *testing.T) {
	srv := redistest.NewServer(t)
	const victimChecks, storm = 60, 10_000
	run := func(withStorm bool) ([]verdict, time.Duration, map[string]int64, *core.Limiter) {
		reader := sdkmetric.NewManualReader()
		// a timeout long enough that a loaded machine does not time the
		// victim out: the property is about the breaker, not latency
		lim := newLimiter(t, srv.Client(t), core.FailClosed, core.WithClock(fixedClock()), core.WithTimeout(time.Second),
			core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		var wg sync.WaitGroup
		stormDone := make(chan struct{})
		if withStorm {
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			for w := range 4 {
				wg.Go(func() {
					for i := range storm / 4 {
						ctx, cancel := cancelled, context.CancelFunc(func() {})
						switch i % 3 {
						case 1:
							ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
						case 2:
							ctx, cancel = context.WithTimeout(context.Background(), 50*time.Microsecond)
						}
						d, err := lim.Allow(ctx, quota.Tenant{ID: "attacker-" + strconv.Itoa(w)}, "default", 1)
						cancel()
						if errors.Is(err, core.ErrStore) || d.Degraded() {
							t.Errorf("storm check: %+v, %v: a caller gone is not a store failure", d, err)
							return
						}
					}
				})
			}
			go func() { wg.Wait(); close(stormDone) }()
		} else {
			close(stormDone)
		}
		var got []verdict
		var worst time.Duration
		for i := range victimChecks {
			start := time.Now()
			d, err := lim.Allow(context.Background(), quota.Tenant{ID: "victim"}, "default", 1)
			worst = max(worst, time.Since(start))
			if err != nil {
				<-stormDone
				t.Fatalf("victim check %d: %v", i, err)
			}
			got = append(got, verdict{d.Allowed, d.Reason, d.Remaining})
			time.Sleep(2 * time.Millisecond) // spread over the storm
		}
		<-stormDone
		return got, worst, storeErrors(t, reader), lim
	}
	quiet, _, _, _ := run(false) // each run has its own key prefix
	stormy, worst, errs, lim := run(true)
	if len(quiet) != len(stormy) {
		t.Fatalf("%d and %d decisions", len(quiet), len(stormy))
	}
	for i := range quiet {
		if quiet[i] != stormy[i] {
			t.Fatalf("victim check %d: %+v under the storm, %+v without", i, stormy[i], quiet[i])
		}
	}
	if n := len(errs); n != 0 {
		t.Fatalf("store errors counted during the storm: %v", errs)
	}
	// the breaker is closed: a fresh tenant is answered by Redis
	if d, err := lim.Allow(context.Background(), quota.Tenant{ID: "fresh"}, "default", 1); err != nil || d.Reason != core.ReasonOK {
		t.Fatalf("after the storm: %+v, %v", d, err)
	}
	// accounting, read back: the victim was charged exactly its admissions
	if r := remaining(t, lim, "victim"); r != 0 || quiet[slowQuota.Capacity-1].remaining != 0 || !quiet[slowQuota.Capacity-1].allowed || quiet[slowQuota.Capacity].allowed {
		t.Fatalf("victim: %d left in Redis; decisions %+v", r, quiet)
	}
	if worst > latencyBound {
		t.Fatalf("worst victim check took %v", worst)
	}
	record(row{"10,000 cancelled and expired checks interleaved with a victim tenant", core.FailClosed, "the victim's decisions equal a run without the storm; breaker closed; 0 store errors", worst})
}

// TestWrongTypeKey: one tenant's bucket key holds a value of the wrong type
// (WRONGTYPE from the script). That tenant's checks are answered by the
// failure policy; every other tenant is served by Redis and the breaker
// stays closed.
func TestWrongTypeKey(t *testing.T) {
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	reader := sdkmetric.NewManualReader()
	// a timeout long enough that a loaded machine does not time out
	// calls: every failure here is the poisoned key's
	lim := newLimiter(t, c, core.FailClosed, core.WithTimeout(time.Second),
		core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	key, err := lim.Keys().Bucket("poisoned", "default")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(context.Background(), key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var poisoned, failedPoisoned int
	var pwg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		pwg.Go(func() {
			repeat(stop, func(int) {
				d, err := lim.Allow(context.Background(), quota.Tenant{ID: "poisoned"}, "default", 1)
				byPolicy := d.Reason == core.ReasonFailedClosed && errors.Is(err, core.ErrStore)
				mu.Lock()
				poisoned++
				if byPolicy {
					failedPoisoned++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			})
		})
	}
	ld := startLoad(lim, 6, 20)
	start := time.Now()
	time.Sleep(time.Second)
	ld.finish()
	close(stop)
	pwg.Wait()
	elapsed := time.Since(start)
	m, worst := ld.snapshot()
	errs := storeErrors(t, reader)
	if m[core.ReasonFailedClosed] != 0 || m[core.ReasonOK] == 0 {
		t.Fatalf("other tenants were answered by the failure policy: %v (store errors %v)", m, errs)
	}
	if poisoned == 0 || failedPoisoned != poisoned {
		t.Fatalf("the poisoned tenant: %d of %d checks answered by the failure policy", failedPoisoned, poisoned)
	}
	if errs["request"] != int64(poisoned) || len(errs) != 1 {
		t.Fatalf("store errors %v, want only %d of kind request", errs, poisoned)
	}
	checkAccounting(t, ld, elapsed+100*time.Millisecond)
	if worst > latencyBound {
		t.Fatalf("worst check took %v", worst)
	}
	record(row{"one tenant's key of the wrong type (WRONGTYPE)", core.FailClosed, "503 (failed_closed) for that tenant only, logged with its key; others served by Redis; breaker closed", worst})
}

// TestLostReply: Redis runs the script but the reply is lost with the
// connection (a fault proxy drops it). The client is built the way the
// examples build theirs (redis.ParseURL defaults: MaxRetries 3). The check
// is answered by the failure policy and the request is charged exactly
// once, read back from Redis: the script is never replayed, alone or
// inside a pipeline.
func TestLostReply(t *testing.T) {
	for _, batched := range []bool{false, true} {
		name := "single"
		if batched {
			name = "pipelined"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.NewServer(t)
			proxy := redistest.NewFaultProxy(t, srv.Addr())
			opt, err := redis.ParseURL(proxy.URL())
			if err != nil {
				t.Fatal(err)
			}
			client := redis.NewClient(opt)
			t.Cleanup(func() { _ = client.Close() })
			reader := sdkmetric.NewManualReader()
			clock := fixedClock()
			lim := newLimiter(t, client, core.FailOpen, core.WithClock(clock), core.WithBatching(batched),
				core.WithCircuitBreaker(0, 0), core.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			// read back through a direct client, past the proxy
			direct, err := core.New(srv.Client(t), resolver(slowQuota), core.WithPrefix(lim.Keys().Prefix()), core.WithClock(clock), core.WithBatching(false), core.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			callers := 1
			if batched {
				callers = 24 // more than the batcher's slots: the rest go out as pipelines
			}
			// warm up: connections open, script cached
			for i := range callers {
				if d, err := lim.Peek(context.Background(), quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default"); err != nil || !d.Allowed {
					t.Fatalf("warm-up: %+v, %v", d, err)
				}
			}
			proxy.Set(redistest.DropReply)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var worst time.Duration
			gate := make(chan struct{})
			for i := range callers {
				wg.Go(func() {
					<-gate
					start := time.Now()
					d, err := lim.Allow(context.Background(), quota.Tenant{ID: "t" + strconv.Itoa(i)}, "default", 1)
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					worst = max(worst, took)
					if !errors.Is(err, core.ErrStore) || d.Reason != core.ReasonFailedOpen {
						t.Errorf("lost reply: %+v, %v; want the failure policy's answer", d, err)
					}
				})
			}
			close(gate)
			wg.Wait()
			proxy.Set(redistest.Pass)
			time.Sleep(time.Second) // a replay, if any, lands meanwhile
			charged := 0
			for i := range callers {
				n := slowQuota.Capacity - remaining(t, direct, "t"+strconv.Itoa(i))
				if n > 1 {
					t.Errorf("tenant t%d charged %d times for one request: the script was replayed", i, n)
				}
				charged += int(n)
			}
			if charged == 0 {
				t.Fatal("no script ran: the fault did not hit a command that reached Redis")
			}
			if batched && largestBatch(t, reader) < 2 {
				t.Fatal("no pipeline formed")
			}
			if worst > latencyBound {
				t.Fatalf("worst check took %v", worst)
			}
			record(row{"reply lost after the script ran (" + name + ", client with MaxRetries 3)", core.FailOpen, "200 (failed_open); charged exactly once, never replayed", worst})
		})
	}
}
