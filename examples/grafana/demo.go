package grafana

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// DemoTiers are the quotas of the demo traffic: small enough that the
// abusive tenant is throttled within a second.
func DemoTiers() quota.Tiers {
	return quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{
		"free": {Classes: map[string]quota.Quota{
			"default":  {Capacity: 20, RefillPerSecond: 10},
			"export":   {Capacity: 4, RefillPerSecond: 1},
			"checkout": {Capacity: 10, RefillPerSecond: 5},
			"bulk":     {Capacity: 10, RefillPerSecond: 5},
			"search":   {Capacity: 10, RefillPerSecond: 4},
		}},
		"pro": {Classes: map[string]quota.Quota{
			"default":  {Capacity: 100, RefillPerSecond: 50},
			"export":   {Capacity: 20, RefillPerSecond: 5},
			"checkout": {Capacity: 50, RefillPerSecond: 25},
			"bulk":     {Capacity: 50, RefillPerSecond: 25},
			"search":   {Capacity: 40, RefillPerSecond: 15},
		}},
	}}
}

// Demo is a process with four limiters recording into one OpenTelemetry
// meter provider whose Prometheus exporter serves Handler, the way a
// service built from the examples exposes /metrics:
//
//   - API: classes default and export, fail-open, tenant label (top 5),
//     the deny cache (deny cache hits);
//   - Payments: class checkout, fail-closed;
//   - Batch: class bulk, local fallback at half the quota;
//   - Shadow: class search, a new limit rolled out in shadow mode.
//
// Each limiter has its own key prefix under the one given.
type Demo struct {
	API, Payments, Batch, Shadow *core.Limiter
	// Handler serves the Prometheus text format (/metrics).
	Handler http.Handler

	mp *sdkmetric.MeterProvider
}

// NewDemo builds the demo's limiters over client, under key prefix prefix,
// logging degraded decisions to log (nil: discarded). Close releases them.
func NewDemo(client redis.UniversalClient, prefix string, log *slog.Logger) (*Demo, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	d := &Demo{mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	res, err := quota.NewResolver(DemoTiers())
	if err != nil {
		return nil, err
	}
	common := []core.Option{core.WithMeterProvider(d.mp), core.WithLogger(log), core.WithTenantLabel(5), core.WithTimeout(50 * time.Millisecond),
		core.WithCircuitBreaker(20, 500*time.Millisecond)}
	mk := func(name string, opts ...core.Option) *core.Limiter {
		if err != nil {
			return nil
		}
		var l *core.Limiter
		l, err = core.New(client, res, append(append([]core.Option{core.WithPrefix(prefix + "-" + name)}, common...), opts...)...)
		return l
	}
	d.API = mk("api", core.WithFailurePolicy(core.FailOpen), core.WithDenyCache(true))
	d.Payments = mk("payments", core.WithFailurePolicy(core.FailClosed))
	d.Batch = mk("batch", core.WithLocalFallback(0.5))
	d.Shadow = mk("shadow", core.WithShadow(true))
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return d, nil
}

// Close closes the limiters and shuts the meter provider down.
func (d *Demo) Close() {
	for _, l := range []*core.Limiter{d.API, d.Payments, d.Batch, d.Shadow} {
		_ = l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.mp.Shutdown(ctx)
}

// A demo tenant and how many requests of each class it sends per second.
type demoTenant struct {
	quota.
		Tenant
	perSecond map[string]float64
}

var demoTenants = []demoTenant{
	{quota.Tenant{ID: "acme", Tier: "pro"}, map[string]float64{"default": 40, "export": 4, "checkout": 10, "bulk": 10, "search": 12}},
	{quota.Tenant{ID: "globex", Tier: "free"}, map[string]float64{"default": 8, "export": 1.5, "checkout": 3, "bulk": 4, "search": 6}},
	{quota.Tenant{ID: "initech", Tier: "free"}, map[string]float64{"default": 12, "export": 2, "checkout": 6, "bulk": 6, "search": 5}},
	// the abusive one: ten times its quota
	{quota.Tenant{ID: "umbrella", Tier: "free"}, map[string]float64{"default": 100, "export": 10, "checkout": 8, "bulk": 12, "search": 20}},
	{quota.Tenant{ID: "hooli", Tier: "pro"}, map[string]float64{"default": 20, "export": 8, "checkout": 5, "bulk": 30, "search": 20}},
}

// Traffic sends one tick's worth (tick long, at the rates above) of the
// scripted traffic through the demo's limiters: five named tenants, one
// abusive, plus a long tail of small tenants that stays under the tenant
// label's "_other". n counts ticks, so fractional rates even out. It
// returns the number of checks made.
func (d *Demo) Traffic(ctx context.Context, n int, tick time.Duration) int {
	checks := 0
	for _, t := range demoTenants {
		for class, rate := range t.perSecond {
			per := rate * tick.Seconds()
			// the requests due by tick n+1 minus those due by tick n
			k := int(per*float64(n+1)) - int(per*float64(n))
			for range k {
				_, _ = d.limiter(class).Allow(ctx, t.Tenant, class, 1) // an error is a degraded decision, which the metrics count
				checks++
			}
		}
	}
	// the long tail: one request from each of a few small tenants per tick
	for i := range 3 {
		t := quota.Tenant{ID: fmt.Sprintf("tail-%03d", (n*3+i)%200), Tier: "free"}
		_, _ = d.API.Allow(ctx, t, "default", 1)
		checks++
	}
	return checks
}

func (d *Demo) limiter(class string) *core.Limiter {
	switch class {
	case "checkout":
		return d.Payments
	case "bulk":
		return d.Batch
	case "search":
		return d.Shadow
	}
	return d.API
}
