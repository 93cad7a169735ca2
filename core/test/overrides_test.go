package core_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A tenant's first override lookup that misses the check timeout is not a
// store failure: with Redis healthy, the store decides the check on the
// tier's defaults (never the failure policy), the answer is counted in
// tollgate.overrides.late, and the lookup, going on, fills the cache so
// that the tenant's next check is on its override.
func TestSlowOverrideSourceIsNotAStoreFailure(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	release := make(chan struct{})
	held := quota.OverridesFunc(func(ctx context.Context, tenantID string) (map[string]quota.Quota, error) {
		select { // the database holds a lock until release
		case <-release:
			return map[string]quota.Quota{"default": quota.PerSecond(500)}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	tiers := quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(20)}}}}
	res, err := quota.NewResolver(tiers, quota.WithOverrides(held), quota.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// the first lookups wait the check timeout: long enough that a loaded
	// machine's Redis answers within it, and the tenants' checks are made
	// together
	const timeout = time.Second
	l := newLimiter(t, redistest.Client(t), res, core.WithMeterProvider(mp), core.WithTimeout(timeout),
		core.WithFailurePolicy(core.FailOpen))
	ctx := context.Background()
	const tenants = 20
	var wg sync.WaitGroup
	for i := range tenants {
		wg.Go(func() {
			tn := quota.Tenant{ID: "new-" + strconv.Itoa(i), Tier: "free"}
			d, err := l.Allow(ctx, tn, "default", 1)
			if err != nil || d.Reason != core.ReasonOK || d.Limit != 20 {
				t.Errorf("tenant %s, override source held: %+v %v; want the store's answer on the tier default (limit 20)", tn.ID, d, err)
			}
		})
	}
	wg.Wait()
	if got := collect(t, reader, "tollgate.decisions", "outcome"); got["allowed"] != tenants || got["failed_open"] != 0 {
		t.Errorf("decisions %v, want %d allowed and none failed open", got, tenants)
	}
	if got := collect(t, reader, "tollgate.overrides.late", "cause", "class", "tier"); got["timeout/default/free"] != tenants {
		t.Errorf("tollgate.overrides.late %v, want %d timeout/default/free", got, tenants)
	}
	close(release)
	tn := quota.Tenant{ID: "new-0", Tier: "free"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := l.Allow(ctx, tn, "default", 1)
		if err != nil || d.Reason != core.ReasonOK {
			t.Fatalf("%+v %v", d, err)
		}
		if d.Limit == 500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the override never applied after the source answered: limit %d", d.Limit)
		}
		time.Sleep(time.Millisecond)
	}
	if n := res.Stats().Loads.Load(); n != tenants {
		t.Errorf("%d lookups, want %d (one per tenant, the late ones)", n, tenants)
	}
}
