package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// collect reads every data point of the counter name, keyed by the given
// attributes joined with "/".
func collect(t *testing.T, r *sdkmetric.ManualReader, name string, keys ...string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T, want a Sum[int64]", name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				k := ""
				for i, key := range keys {
					v, _ := dp.Attributes.Value(attribute.Key(key))
					if i > 0 {
						k += "/"
					}
					k += v.String()
				}
				out[k] += dp.Value
			}
		}
	}
	return out
}

func histogramCount(t *testing.T, r *sdkmetric.ManualReader, name string) uint64 {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

func TestMetricsCountDecisions(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{
		"default": {Capacity: 3, RefillPerSecond: 0.001}, "export": {Capacity: 1, RefillPerSecond: 0.001}}}}}
	res, _ := quota.NewResolver(tiers)
	l := newLimiter(t, redistest.Client(t), res, core.WithMeterProvider(mp))
	ctx := context.Background()
	tn := quota.Tenant{ID: "t1", Tier: "free"}
	for range 5 { // 3 allowed, 2 denied
		_, _ = l.Allow(ctx, tn, "default", 1)
	}
	for range 2 { // 1 allowed, 1 denied
		_, _ = l.Allow(ctx, tn, "export", 1)
	}
	_, _ = l.Allow(ctx, tn, "export", 5) // never

	got := collect(t, reader, "tollgate.decisions", "outcome", "class", "tier")
	want := map[string]int64{"allowed/default/free": 3, "denied/default/free": 2, "allowed/export/free": 1, "denied/export/free": 2}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("decisions[%s] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	// the bucket label names the binding bucket (Decision.Bucket)
	byBucket := collect(t, reader, "tollgate.decisions", "outcome", "bucket")
	if byBucket["denied/default"] != 2 || byBucket["denied/export"] != 2 {
		t.Errorf("decisions by bucket = %v, want 2 denied/default and 2 denied/export", byBucket)
	}
	if n := histogramCount(t, reader, "tollgate.store.duration"); n != 8 {
		t.Errorf("store latency samples = %d, want 8", n)
	}

	// a fail-open and a fail-closed episode are labelled as such
	srv := redistest.NewServer(t)
	c := srv.Client(t)
	srv.Kill()
	for _, p := range []core.FailurePolicy{core.FailOpen, core.FailClosed} {
		dl, err := core.New(c, res, core.WithMeterProvider(mp), core.WithFailurePolicy(p), core.WithCircuitBreaker(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			_, _ = dl.Allow(ctx, tn, "default", 1)
		}
	}
	got = collect(t, reader, "tollgate.decisions", "outcome")
	if got["failed_open"] != 2 || got["failed_closed"] != 2 {
		t.Errorf("degraded outcomes = %v, want 2 failed_open and 2 failed_closed", got)
	}
	// a refused connection is seen as "connection" or, when the client's
	// own dial retries outlast the check's timeout, as "timeout"
	errs := collect(t, reader, "tollgate.store.errors", "policy")
	if errs["open"] != 2 || errs["closed"] != 2 {
		t.Errorf("store errors = %v, want 2 per policy", errs)
	}
	for kind := range collect(t, reader, "tollgate.store.errors", "kind") {
		if kind != "connection" && kind != "timeout" {
			t.Errorf("store error kind %q, want connection or timeout", kind)
		}
	}
}

func TestTenantLabelCardinality(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	const k = 5
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 1, RefillPerSecond: 0.001}}),
		core.WithMeterProvider(mp), core.WithTenantLabel(k), core.WithDenyCache(true))
	ctx := context.Background()
	// a heavy hitter, denied over and over
	for range 30 {
		_, _ = l.Allow(ctx, quota.Tenant{ID: "abuser"}, "default", 1)
	}
	// 10,000 distinct tenants, each denied once
	for i := range 10000 {
		tn := quota.Tenant{ID: "tenant-" + strconv.Itoa(i)}
		_, _ = l.Allow(ctx, tn, "default", 1)
		_, _ = l.Allow(ctx, tn, "default", 1)
	}
	got := collect(t, reader, "tollgate.decisions", "tenant")
	if len(got) > k+1 {
		t.Fatalf("tenant label has %d values, want <= %d", len(got), k+1)
	}
	// labelled from its 10th denial (the 11th request) on
	if got["abuser"] != 20 {
		t.Fatalf("the heavy hitter is not labelled: %v", got)
	}
	if got["_other"] != 20010 {
		t.Fatalf("other tenants = %d, want 20010", got["_other"])
	}
	if hits := collect(t, reader, "tollgate.deny_cache.hits"); hits[""] == 0 {
		t.Fatalf("deny cache hits not counted: %v", hits)
	}
}

func TestTraceEvent(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	l := newLimiter(t, redistest.Client(t), staticResolver(quota.Bucket{Name: "default", Quota: quota.PerSecond(5)}))
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	_, _ = l.Allow(ctx, quota.Tenant{ID: "t1"}, "default", 2)
	span.End()
	spans := sr.Ended()
	if len(spans) != 1 || len(spans[0].Events()) != 1 || spans[0].Events()[0].Name != "tollgate.decision" {
		t.Fatalf("want one tollgate.decision event, got %+v", spans)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range spans[0].Events()[0].Attributes {
		attrs[a.Key] = a.Value
	}
	if attrs["tollgate.outcome"].AsString() != "allowed" || attrs["tollgate.remaining"].AsInt64() != 3 {
		t.Fatalf("event attributes %v", attrs)
	}
	_ = time.Second
}
