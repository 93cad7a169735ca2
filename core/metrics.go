package core

import (
	"github.com/tollgate-go/tollgate/core/internal/shard"
	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"

	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Instrument names. Every adapter shares them, because they are recorded
// here, in core; https://github.com/tollgate-go/tollgate/blob/main/docs/observability.md#metrics lists them with their labels, and
// dashboards and alerts name them there.
const (
	// metricDecisions counts decisions, by outcome (allowed, denied,
	// failed_open, failed_closed, fallback, shadow_denied, invalid,
	// unresolved, canceled, overloaded), reason, class, tier and binding bucket, and
	// tenant when WithTenantLabel is on.
	metricDecisions = "tollgate.decisions"
	// metricStoreDuration is the client-side latency of the store call, in
	// seconds, by result (ok, error).
	metricStoreDuration = "tollgate.store.duration"
	// metricStoreErrors counts store failures by kind (timeout, connection,
	// oom, circuit_open, stalled, request, other) and failure policy. Kind
	// stalled is a check that waited in the batcher's queue for the whole
	// timeout while no batch came back (the store held the batches ahead).
	// Kind request is an error reply about one request's keys (WRONGTYPE, a
	// script error, a reply that cannot be decoded): that request's failure,
	// never counted by the circuit breaker. A check whose caller left first
	// is not a store failure and is not counted.
	metricStoreErrors = "tollgate.store.errors"
	// metricShed counts checks shed because this process could not make
	// them in time (ReasonOverloaded), by cause: queue_full, tenant_share
	// (the tenant held its whole share of the batcher's queue), queue_wait
	// (queued longer than its budget), connection_wait (no connection
	// within its budget), late_reply (no reply within the timeout while the
	// store answered other checks or a probe). None is a store failure.
	metricShed = "tollgate.checks.shed"
	// metricDenyCacheHits counts requests denied locally by the deny cache,
	// without a store call.
	metricDenyCacheHits = "tollgate.deny_cache.hits"
	// metricBatchSize is the number of checks per pipelined round trip
	// (WithBatching).
	metricBatchSize = "tollgate.batch.size"
	// metricSlotsHeld is the number of concurrency slots this process holds
	// (requests admitted under a concurrency limit and still in flight), by
	// class, tier and bucket; summed over replicas, the fleet's.
	metricSlotsHeld = "tollgate.slots.held"
	// metricSlotsExpired counts slots this process left to expire in the
	// store instead of releasing them, by cause: release_failed (the store
	// could not be reached within the lease time), lost (a renewal found
	// the slot gone: reset, or expired while the store was unreachable).
	metricSlotsExpired = "tollgate.slots.expired"
	// metricSettlesFailed counts reservations whose settle failed
	// (Limiter.Settle, Verdict.Done), by kind as the store errors': the
	// estimate stays charged (a refund not given, a debt not taken), or,
	// when the reply was lost after the script ran, the settle applied
	// unseen. Not a check: neither the decisions nor the store errors
	// count it.
	metricSettlesFailed = "tollgate.settles.failed"
	// metricSettlesForgiven counts tokens a settle did not charge because a
	// bucket's debt reached its floor (Quota.MaxDebt, or the storage
	// floor of 400 days of refill), by class, tier and bucket, and tenant
	// when WithTenantLabel is on.
	metricSettlesForgiven = "tollgate.settles.forgiven"
	// metricSettlesRefused counts tokens of actual costs a settle refused
	// to charge, above Quota.MaxSettleRatio times the estimate, labelled as
	// the forgiven tokens.
	metricSettlesRefused = "tollgate.settles.refused"
	// metricHoldDuration is how long requests were held for their
	// reservation's time (Limiter.Hold, a gate's WithHold), in seconds,
	// by class, tier and result (served: admitted at its time; canceled:
	// the caller left first). Its count is the number of held requests; a
	// request admitted at once or refused is not held and not recorded.
	// The decision itself is counted once, in the decisions metric.
	metricHoldDuration = "tollgate.hold.duration"
)

// otherTenant is the tenant label of every tenant outside the top K
// (WithTenantLabel).
const otherTenant = "_other"

type metrics struct {
	decisions     metric.Int64Counter
	storeDur      metric.Float64Histogram
	storeErrs     metric.Int64Counter
	shed          metric.Int64Counter
	overrides     metric.Int64Counter // metricOverridesLate
	denyCacheHits metric.Int64Counter
	batches       metric.Int64Histogram
	slotsHeld     metric.Int64UpDownCounter
	slotsExpired  metric.Int64Counter
	settlesFailed metric.Int64Counter
	forgiven      metric.Int64Counter
	refused       metric.Int64Counter
	holds         metric.Float64Histogram
	tenants       *topK // nil: no tenant label
	tracing       bool

	// attribute sets are hashed and sorted when built: cached per label
	// tuple, they cost a map lookup on the hot path
	// and held as the option slices Add and Record take, which would
	// otherwise be allocated on every call
	sets  sync.Map // decisionLabels -> []metric.AddOption
	nsets atomic.Int64
}

// decisionLabels is the label tuple of the decisions metric, unvalidated.
// decisionLabels is a decision's labels as the check has them: the
// outcome and reason strings are made once per cached set, not per check.
type decisionLabels struct {
	reason              Reason
	fallback            bool
	class, tier, bucket string
}

// maxCachedSets bounds the attribute-set cache (labels are bounded names,
// but a misconfigured resolver could vary them): past it, sets are built
// per call as before.
const maxCachedSets = 4096

func newMetrics(mp metric.MeterProvider, k int) *metrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter("github.com/tollgate-go/tollgate/core")
	m := &metrics{tracing: true}
	// Instrument creation fails only for invalid names, which are constants
	// here; a nil instrument would be a bug, so fall back to no-ops.
	var err error
	if m.decisions, err = meter.Int64Counter(metricDecisions, metric.WithDescription("Rate-limit decisions."), metric.WithUnit("{decision}")); err != nil {
		otel.Handle(err)
	}
	if m.storeDur, err = meter.Float64Histogram(metricStoreDuration, metric.WithDescription("Latency of the rate-limit store call, at the client."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)); err != nil {
		otel.Handle(err)
	}
	if m.storeErrs, err = meter.Int64Counter(metricStoreErrors, metric.WithDescription("Rate-limit store failures."), metric.WithUnit("{error}")); err != nil {
		otel.Handle(err)
	}
	if m.shed, err = meter.Int64Counter(metricShed, metric.WithDescription("Rate-limit checks shed: this process could not make them in time."), metric.WithUnit("{check}")); err != nil {
		otel.Handle(err)
	}
	if m.overrides, err = meter.Int64Counter(metricOverridesLate, metric.WithDescription("Checks given the tier defaults: the tenant's overrides were not loaded in time."), metric.WithUnit("{check}")); err != nil {
		otel.Handle(err)
	}
	if m.denyCacheHits, err = meter.Int64Counter(metricDenyCacheHits, metric.WithDescription("Requests denied by the local deny cache without a store call."), metric.WithUnit("{request}")); err != nil {
		otel.Handle(err)
	}
	if m.batches, err = meter.Int64Histogram(metricBatchSize, metric.WithDescription("Checks per pipelined round trip (WithBatching)."),
		metric.WithUnit("{check}"), metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128)); err != nil {
		otel.Handle(err)
	}
	if m.slotsHeld, err = meter.Int64UpDownCounter(metricSlotsHeld, metric.WithDescription("Concurrency slots held by this process."), metric.WithUnit("{slot}")); err != nil {
		otel.Handle(err)
	}
	if m.slotsExpired, err = meter.Int64Counter(metricSlotsExpired, metric.WithDescription("Concurrency slots left to expire instead of released."), metric.WithUnit("{slot}")); err != nil {
		otel.Handle(err)
	}
	if m.settlesFailed, err = meter.Int64Counter(metricSettlesFailed, metric.WithDescription("Reservations whose settle failed: the estimate stands."), metric.WithUnit("{settle}")); err != nil {
		otel.Handle(err)
	}
	if m.forgiven, err = meter.Int64Counter(metricSettlesForgiven, metric.WithDescription("Tokens a settle forgave: a debt reached its cap."), metric.WithUnit("{token}")); err != nil {
		otel.Handle(err)
	}
	if m.refused, err = meter.Int64Counter(metricSettlesRefused, metric.WithDescription("Tokens of actual costs a settle refused, above the largest multiple of the estimate."), metric.WithUnit("{token}")); err != nil {
		otel.Handle(err)
	}
	if m.holds, err = meter.Float64Histogram(metricHoldDuration, metric.WithDescription("Time requests were held for their reservation's time."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		otel.Handle(err)
	}
	if k > 0 {
		m.tenants = newTopK(k)
	}
	return m
}

// slotLabels is the label set of a slot's metrics, bounded as the
// decisions'.
func (m *metrics) slotLabels(tier, class, bucket string) metric.AddOption {
	return metric.WithAttributes(
		attribute.String("class", label(class, quota.DefaultClass)),
		attribute.String("tier", label(tier, "none")),
		attribute.String("bucket", label(bucket, "none")),
	)
}

// slotSet is the label set of the slot of call c in bucket (the slot
// forgets' hook).
func (m *metrics) slotSet(c stack.Call, bucket string) metric.AddOption {
	return m.slotLabels(c.Tenant.Tier, c.Class, bucket)
}

// denyCacheHit counts a check the deny cache answered (its layer's hook).
func (m *metrics) denyCacheHit(ctx context.Context) {
	m.denyCacheHits.Add(ctx, 1)
}

func (m *metrics) slotExpired(labels metric.AddOption, cause string) {
	m.slotsExpired.Add(context.Background(), 1, labels, metric.WithAttributes(attribute.String("cause", cause)))
}

func (m *metrics) settleFailed(err error) {
	m.settlesFailed.Add(context.Background(), 1, metric.WithAttributes(attribute.String("kind", shard.ErrorKind(err))))
}

// settleUncharged records the tokens a settle of tenant t's request of
// class did not charge bucket: forgiven at its floor, refused above its
// ratio. The tenant label, when on, counts it as a denial does.
func (m *metrics) settleUncharged(t quota.Tenant, class, bucket string, forgiven, refused int64) {
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs,
		attribute.String("class", label(class, quota.DefaultClass)),
		attribute.String("tier", label(t.Tier, "none")),
		attribute.String("bucket", label(bucket, "none")),
	)
	if m.tenants != nil {
		attrs = append(attrs, attribute.String("tenant", m.tenants.label(t.ID, true)))
	}
	set := metric.WithAttributes(attrs...)
	if forgiven > 0 {
		m.forgiven.Add(context.Background(), forgiven, set)
	}
	if refused > 0 {
		m.refused.Add(context.Background(), refused, set)
	}
}

// hold records one request held for d by Limiter.Hold, with its result
// (served, canceled).
func (m *metrics) hold(req Request, d time.Duration, result string) {
	m.holds.Record(context.Background(), d.Seconds(), metric.WithAttributes(
		attribute.String("class", label(req.Class, quota.DefaultClass)),
		attribute.String("tier", label(req.Tenant.Tier, "none")),
		attribute.String("result", result),
	))
}

// outcome is the decision's outcome label.
func outcomeLabel(d Decision) string {
	switch {
	case d.Fallback:
		return "fallback"
	case d.Reason == ReasonOK:
		return "allowed"
	case d.Denied():
		return "denied"
	}
	return d.Reason.String()
}

// label keeps a label value bounded: a valid name, or "invalid".
func label(s, empty string) string {
	if s == "" {
		return empty
	}
	if quota.ValidateName(s) != nil {
		return "invalid"
	}
	return s
}

func (m *metrics) record(ctx context.Context, req Request, d Decision) {
	if m.tenants == nil {
		m.decisions.Add(ctx, 1, m.decisionSet(decisionLabels{d.Reason, d.Fallback, req.Class, req.Tenant.Tier, d.Bucket})...)
	} else {
		m.recordTenant(ctx, req, d)
	}
	if m.tracing {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("tollgate.decision", trace.WithAttributes(
				attribute.String("tollgate.outcome", outcomeLabel(d)),
				attribute.String("tollgate.reason", d.Reason.String()),
				attribute.String("tollgate.bucket", d.Bucket),
				attribute.Int64("tollgate.limit", d.Limit),
				attribute.Int64("tollgate.remaining", d.Remaining),
				attribute.Int64("tollgate.cost", d.Cost),
				attribute.Float64("tollgate.retry_after_s", d.RetryAfter.Seconds()),
			))
		}
	}
}

func (m *metrics) decisionSet(k decisionLabels) []metric.AddOption {
	if o, ok := m.sets.Load(k); ok {
		return o.([]metric.AddOption)
	}
	o := []metric.AddOption{metric.WithAttributes(
		attribute.String("outcome", outcomeLabel(Decision{Reason: k.reason, Fallback: k.fallback})),
		attribute.String("reason", k.reason.String()),
		attribute.String("class", label(k.class, quota.DefaultClass)),
		attribute.String("tier", label(k.tier, "none")),
		attribute.String("bucket", label(k.bucket, "none")),
	)}
	if m.nsets.Load() < maxCachedSets {
		if _, loaded := m.sets.LoadOrStore(k, o); !loaded {
			m.nsets.Add(1)
		}
	}
	return o
}

// recordTenant records a decision with the tenant label (WithTenantLabel).
func (m *metrics) recordTenant(ctx context.Context, req Request, d Decision) {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		attribute.String("outcome", outcomeLabel(d)),
		attribute.String("reason", d.Reason.String()),
		attribute.String("class", label(req.Class, quota.DefaultClass)),
		attribute.String("tier", label(req.Tenant.Tier, "none")),
		attribute.String("bucket", label(d.Bucket, "none")),
	)
	if m.tenants != nil {
		attrs = append(attrs, attribute.String("tenant", m.tenants.label(req.Tenant.ID, !d.Allowed || d.Reason == ReasonShadowDenied)))
	}
	m.decisions.Add(ctx, 1, metric.WithAttributes(attrs...))
}

// shedCheck counts a shed check by cause (the guard's hook).
func (m *metrics) shedCheck(ctx context.Context, cause string) {
	m.shed.Add(ctx, 1, metric.WithAttributes(attribute.String("cause", cause)))
}

// topK labels at most k tenants, the first heavy hitters seen by denials,
// and every other tenant otherTenant ("_other"), so the label's cardinality is at most
// k+1 for the life of the process, whatever the number of tenants. A
// space-saving sketch of k*8 counters finds the heavy hitters.
type topK struct {
	mu       sync.Mutex
	k        int
	labelled map[string]bool
	counts   map[string]*ssCounter
	capacity int
}

// ssCounter is a space-saving counter: count overestimates the true count by
// at most err, the count inherited from the evicted counter.
type ssCounter struct{ count, err int64 }

func newTopK(k int) *topK {
	return &topK{k: k, labelled: map[string]bool{}, counts: map[string]*ssCounter{}, capacity: k * 8}
}

// threshold is the count at which a tenant is labelled.
const heavyHitterThreshold = 10

func (h *topK) label(tenant string, denied bool) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.labelled[tenant] {
		return keys.EscapeID(tenant)
	}
	if !denied {
		return otherTenant
	}
	c, ok := h.counts[tenant]
	if !ok {
		c = &ssCounter{}
		if len(h.counts) >= h.capacity {
			// space-saving: replace the smallest counter, inheriting its
			// count as the new counter's error bound
			var minKey string
			var minC *ssCounter
			for k, v := range h.counts {
				if minC == nil || v.count < minC.count {
					minKey, minC = k, v
				}
			}
			delete(h.counts, minKey)
			c.count, c.err = minC.count, minC.count
		}
		h.counts[tenant] = c
	}
	c.count++
	// label only a guaranteed heavy hitter: its true count is at least
	// count - err
	if c.count-c.err >= heavyHitterThreshold && len(h.labelled) < h.k {
		h.labelled[tenant] = true
		return keys.EscapeID(tenant)
	}
	return otherTenant
}
