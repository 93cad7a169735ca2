package faults_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// settleFault is a way the store fails a reservation's check or its settle:
// faultProxy's fault on the limiter's connections, or the proxy closed
// (new connections refused).
type settleFault struct {
	name  string
	fault redistest.Fault // refused when 0 (Pass)
}

var settleFaults = []settleFault{
	{"blackholed", redistest.Blackhole},
	{"connections reset", redistest.Reset},
	{"connections refused", redistest.Pass},
}

func (f settleFault) inject(p *redistest.FaultProxy) {
	if f.fault == redistest.Pass {
		p.Close() // the listener closes: every dial is refused
		return
	}
	p.Set(f.fault)
}

// estimate is the route's cost in the settle faults: a reservation of 5 of
// slowQuota's 20.
const estimate = 5

// settleRig is a limiter whose every connection to a real Redis goes
// through a fault proxy, behind a gate that takes cost reports, beside a
// limiter that reads the buckets back past the proxy.
type settleRig struct {
	proxy  *redistest.FaultProxy
	lim    *core.Limiter
	gate   *gate.Gate
	direct *core.Limiter
	logs   *testkit.LogBuffer
	reader *sdkmetric.ManualReader
}

func newSettleRig(t *testing.T, p core.FailurePolicy) *settleRig {
	t.Helper()
	srv := redistest.NewServer(t)
	r := &settleRig{proxy: redistest.NewFaultProxy(t, srv.Addr()), logs: &testkit.LogBuffer{}, reader: sdkmetric.NewManualReader()}
	opt, err := redis.ParseURL(r.proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt) // as the examples build theirs: MaxRetries 3
	t.Cleanup(func() { _ = client.Close() })
	clock := fixedClock() // no refill: balances are exact
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r.lim = newLimiter(t, client, p, core.WithClock(clock), core.WithLogger(r.logs.Logger()), core.WithMeterProvider(mp))
	if r.gate, err = gate.New(r.lim, gate.WithCostReports(), gate.WithRoutes(gate.Routes{"POST /v1/complete": {Class: "default", Cost: estimate}})); err != nil {
		t.Fatal(err)
	}
	// the read-back, straight to the server, with a timeout no loaded
	// machine misses: the test's instrument, not its subject
	if r.direct, err = core.New(srv.Client(t), resolver(slowQuota), core.WithPrefix(r.lim.Keys().Prefix()), core.WithClock(clock), core.WithTimeout(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.direct.Close() })
	return r
}

// decide is a request of tenant to the limited route, as an adapter makes
// it: the verdict, the context it hands the handler, and how long the check
// took.
func (r *settleRig) decide(tenant string) (gate.Verdict, context.Context, bool, time.Duration) {
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: tenant})
	start := time.Now()
	v := r.gate.Decide(ctx, gate.Endpoint{Method: "POST", Pattern: "/v1/complete"})
	took := time.Since(start)
	ctx, ok := v.CostContext(ctx)
	return v, ctx, ok, took
}

// tokens reads tenant's balance back from Redis, past the proxy.
func (r *settleRig) tokens(t *testing.T, tenant string) float64 {
	t.Helper()
	d, err := r.direct.Peek(context.Background(), quota.Tenant{ID: tenant}, "default")
	if err != nil {
		t.Fatalf("read back %s: %v", tenant, err)
	}
	return d.Tokens
}

// settleFailures returns the settle failures the limiter counted, by kind.
func (r *settleRig) settleFailures(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "tollgate.settles.failed" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				k, _ := dp.Attributes.Value(attribute.Key("kind"))
				out[k.AsString()] += dp.Value
			}
		}
	}
	return out
}

// TestSettleStoreFailureAtReserve: the store fails at the reservation (the
// check that charges the estimate). The failure policy answers as for any
// check, within the check's bound: fail-open admits the request with no
// reservation (the handler's report is refused, ErrInvalidRequest, and
// nothing is charged or settled), fail-closed answers 503 and the handler
// never runs.
func TestSettleStoreFailureAtReserve(t *testing.T) {
	for _, f := range settleFaults {
		for _, p := range policies {
			t.Run(f.name+"/"+p.String(), func(t *testing.T) {
				r := newSettleRig(t, p)
				if v, _, ok, _ := r.decide("warm"); !v.Proceed || !ok { // connections open, script cached
					t.Fatalf("warm-up: %+v", v.Decision)
				}
				f.inject(r.proxy)
				v, ctx, ok, took := r.decide("payer")
				if took > latencyBound {
					t.Fatalf("the check took %v with the store %s", took, f.name)
				}
				if !errors.Is(v.Err, core.ErrStore) {
					t.Fatalf("verdict error %v, want ErrStore", v.Err)
				}
				if ok {
					t.Fatal("a reservation the store never charged was handed to the handler")
				}
				switch p {
				case core.FailOpen:
					if !v.Proceed || v.Decision.Reason != core.ReasonFailedOpen {
						t.Fatalf("fail-open: proceed %v, %v", v.Proceed, v.Decision.Reason)
					}
					if err := gate.ReportCost(ctx, 12); !errors.Is(err, core.ErrInvalidRequest) {
						t.Fatalf("a report without a reservation: %v, want ErrInvalidRequest", err)
					}
				case core.FailClosed:
					if v.Proceed || v.Status != 503 {
						t.Fatalf("fail-closed: proceed %v, status %d", v.Proceed, v.Status)
					}
				}
				v.Done()
				if got := r.tokens(t, "payer"); got != float64(slowQuota.Capacity) {
					t.Fatalf("payer holds %v tokens, want %d: nothing charged, nothing settled", got, slowQuota.Capacity)
				}
				if n := r.settleFailures(t); len(n) != 0 {
					t.Fatalf("settle failures counted %v for a request with nothing to settle", n)
				}
				answer := policyAnswer(p) + "; no reservation: the handler's report is refused (ErrInvalidRequest), nothing charged or settled"
				if p == core.FailClosed {
					answer = policyAnswer(p) + "; the handler never runs, nothing charged or settled"
				}
				record(row{"store " + f.name + " at the reservation of a reported cost", p, answer, took})
			})
		}
	}
}

// TestSettleStoreFailureAtSettle: the store fails between the reservation
// and the settle (the handler ran and reported its actual cost, less or
// more than the estimate). The settle fails on its own, whatever the
// failure policy (the request was already answered): Done returns within
// the check timeout, the estimate stays charged (neither the refund nor
// the debt is applied), the failure is logged and counted
// (tollgate.settles.failed by kind), and no other tenant's bucket is
// touched. Under a lost reply (the script ran, its answer did not come
// back) the settle is applied exactly once, never replayed, and still
// reported as failed.
func TestSettleStoreFailureAtSettle(t *testing.T) {
	faults := append(settleFaults[:len(settleFaults):len(settleFaults)], settleFault{"replies lost (the script ran)", redistest.DropReply})
	for _, f := range faults {
		for _, p := range policies {
			t.Run(f.name+"/"+p.String(), func(t *testing.T) {
				r := newSettleRig(t, p)
				// warm up: connections open, both scripts cached (else a
				// lost reply would be EVALSHA's NOSCRIPT, and nothing ran)
				warm, wctx, _, _ := r.decide("warm")
				if err := gate.ReportCost(wctx, 1); err != nil {
					t.Fatal(err)
				}
				warm.Done()
				if got := r.tokens(t, "warm"); got != float64(slowQuota.Capacity-1) {
					t.Fatalf("warm-up settle: %v tokens, want %d", got, slowQuota.Capacity-1)
				}
				refund, rctx, rok, _ := r.decide("refund") // reports 1 of 5
				debt, dctx, dok, _ := r.decide("debt")     // reports 30 of 5: beyond its balance
				if !refund.Proceed || !debt.Proceed || !rok || !dok {
					t.Fatalf("reservations: %v %v", refund.Decision.Reason, debt.Decision.Reason)
				}
				if err := gate.ReportCost(rctx, 1); err != nil {
					t.Fatal(err)
				}
				if err := gate.ReportCost(dctx, 30); err != nil {
					t.Fatal(err)
				}
				bystander, _, _, _ := r.decide("bystander") // reported nothing: nothing to settle
				f.inject(r.proxy)
				var worst time.Duration
				for _, v := range []gate.Verdict{refund, debt, bystander} {
					start := time.Now()
					v.Done() // as the adapter does when the handler returns
					worst = max(worst, time.Since(start))
				}
				// Done is bounded by the check timeout (100 ms), plus slack
				// for a loaded machine
				if worst > latencyBound {
					t.Fatalf("Done took %v with the store %s", worst, f.name)
				}
				wantRefund, wantDebt := float64(slowQuota.Capacity-estimate), float64(slowQuota.Capacity-estimate)
				behaviour := "Done returns within the timeout; the estimate stays charged (no refund, no debt); logged and counted (tollgate.settles.failed); other tenants untouched"
				if f.fault == redistest.DropReply {
					// the script ran once: the refund and the debt applied
					wantRefund, wantDebt = float64(slowQuota.Capacity-1), float64(slowQuota.Capacity-30)
					behaviour = "Done returns within the timeout; the settle applied exactly once, never replayed; reported as failed (logged, counted); other tenants untouched"
				}
				if got := r.tokens(t, "refund"); got != wantRefund {
					t.Errorf("refund: %v tokens, want %v", got, wantRefund)
				}
				if got := r.tokens(t, "debt"); got != wantDebt {
					t.Errorf("debt: %v tokens, want %v", got, wantDebt)
				}
				if got := r.tokens(t, "bystander"); got != float64(slowQuota.Capacity-estimate) {
					t.Errorf("bystander: %v tokens, want %d", got, slowQuota.Capacity-estimate)
				}
				if got := r.tokens(t, "stranger"); got != float64(slowQuota.Capacity) {
					t.Errorf("a tenant with no request: %v tokens, want %d", got, slowQuota.Capacity)
				}
				counted := int64(0)
				for _, n := range r.settleFailures(t) {
					counted += n
				}
				if counted != 2 {
					t.Errorf("settle failures counted %v, want the 2 that reported a cost", r.settleFailures(t))
				}
				if logs := r.logs.String(); !strings.Contains(logs, "could not be settled") || !strings.Contains(logs, "tenant=refund") {
					t.Errorf("the failed settle was not logged with its tenant:\n%s", logs)
				}
				record(row{"store " + f.name + " between the reservation and the settle of a reported cost", p, behaviour, worst})
			})
		}
	}
}

// TestSettleClusterMasterHung: on a Cluster of three masters, the master
// holding one tenant's buckets hangs (SIGSTOP) between the reservations
// and their settles. That tenant's settle fails within the timeout and its
// estimate stands (logged, counted); a tenant on another master is settled
// as usual, in the same moment, by the same limiter.
func TestSettleClusterMasterHung(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 0)
	cc := cl.Client(t)
	logs := &testkit.LogBuffer{}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	lim := newLimiter(t, cc, core.FailClosed, core.WithClock(fixedClock()), core.WithLogger(logs.Logger()), core.WithMeterProvider(mp))
	g, err := gate.New(lim, gate.WithCostReports(), gate.WithRoutes(gate.Routes{"POST /v1/complete": {Class: "default", Cost: estimate}}))
	if err != nil {
		t.Fatal(err)
	}
	r := &settleRig{lim: lim, gate: g, direct: lim, logs: logs, reader: reader}
	ctx := context.Background()
	hung := cl.Master(t, 0)
	var victim, other string
	for i := 0; victim == "" || other == ""; i++ {
		tenant := "t" + strconv.Itoa(i)
		key, err := lim.Keys().Bucket(tenant, "default")
		if err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.Options().Addr == hung.Addr() && victim == "":
			victim = tenant
		case m.Options().Addr != hung.Addr() && other == "":
			other = tenant
		}
	}
	var verdicts []gate.Verdict
	for _, tenant := range []string{victim, other} {
		v, vctx, ok, _ := r.decide(tenant)
		if !v.Proceed || !ok {
			t.Fatalf("reservation of %s: %v, %v", tenant, v.Decision.Reason, v.Err)
		}
		if err := gate.ReportCost(vctx, 1); err != nil { // 1 of 5: a refund of 4
			t.Fatal(err)
		}
		verdicts = append(verdicts, v)
	}
	if err := hung.Pause(); err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for _, v := range verdicts {
		start := time.Now()
		v.Done()
		worst = max(worst, time.Since(start))
	}
	if err := hung.Resume(); err != nil {
		t.Fatal(err)
	}
	if worst > latencyBound {
		t.Fatalf("Done took %v with a master hung", worst)
	}
	waitDecided(t, lim, "the resumed master")
	if got := r.tokens(t, victim); got != float64(slowQuota.Capacity-estimate) {
		t.Errorf("%s on the hung master: %v tokens, want the estimate charged (%d)", victim, got, slowQuota.Capacity-estimate)
	}
	if got := r.tokens(t, other); got != float64(slowQuota.Capacity-1) {
		t.Errorf("%s on a live master: %v tokens, want settled to 1 (%d)", other, got, slowQuota.Capacity-1)
	}
	counted := int64(0)
	for _, n := range r.settleFailures(t) {
		counted += n
	}
	if counted != 1 {
		t.Errorf("settle failures counted %v, want the one on the hung master", r.settleFailures(t))
	}
	if !strings.Contains(logs.String(), "tenant="+victim) {
		t.Errorf("the failed settle was not logged with its tenant:\n%s", logs.String())
	}
	record(row{"Cluster master of three hung (SIGSTOP) between the reservation and the settle of a reported cost", core.FailClosed,
		"that master's tenant: Done returns within the timeout, the estimate stands (logged, counted); a tenant on another master settled as usual", worst})
}
