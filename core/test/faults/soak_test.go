package faults_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestSoak runs several limiter instances (separate clients: replicas) over
// thousands of tenants with mixed classes and costs, for a bounded time
// (TOLLGATE_SOAK, default 10s), and then checks the token-bucket bound for
// every tenant and bucket: what each admitted never exceeds capacity + rate
// x elapsed, for the class buckets and the tenant-wide ceiling alike.
func TestSoak(t *testing.T) {
	duration := 10 * time.Second
	if v := os.Getenv("TOLLGATE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TOLLGATE_SOAK=%q: %v", v, err)
		}
		duration = d
	}
	const instances, tenants, workers = 4, 3000, 16
	classes := map[string]quota.Quota{
		"default": {Capacity: 10, RefillPerSecond: 2},
		"export":  {Capacity: 20, RefillPerSecond: 1},
	}
	ceiling := quota.Quota{Capacity: 25, RefillPerSecond: 2.5}
	tiers := quota.Tiers{Default: "std", Tiers: map[string]quota.Tier{"std": {Classes: classes, Ceiling: &ceiling}}}
	prefix := redistest.Prefix(t)
	url := redistest.URL(t)
	lims := make([]*core.Limiter, instances)
	for i := range lims {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		res, err := quota.NewResolver(tiers)
		if err != nil {
			t.Fatal(err)
		}
		// the first two replicas batch and use the deny cache, the others do not
		l, err := core.New(c, res, core.WithPrefix(prefix), core.WithTimeout(2*time.Second),
			core.WithBatching(i < 2), core.WithDenyCache(i < 2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lims[i] = l
	}
	type key struct{ tenant, bucket string }
	var mu sync.Mutex
	admitted := map[key]int64{}
	var calls, errs int64
	stop := time.Now().Add(duration)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) {
				// a skewed mix: a few hot tenants, a long tail
				n := rng.IntN(tenants)
				if rng.IntN(4) == 0 {
					n = rng.IntN(10)
				}
				tenant := "tenant-" + strconv.Itoa(n)
				class, cost := "default", int64(1+rng.IntN(2))
				if rng.IntN(5) == 0 {
					class, cost = "export", int64(1+rng.IntN(5))
				}
				d, err := lims[rng.IntN(instances)].Allow(context.Background(), quota.Tenant{ID: tenant}, class, cost)
				mu.Lock()
				calls++
				if err != nil {
					errs++
				} else if d.Allowed {
					admitted[key{tenant, class}] += cost
					admitted[key{tenant, quota.CeilingBucket}] += cost
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if errs > 0 {
		t.Fatalf("%d of %d checks failed", errs, calls)
	}
	worst, worstKey := 0.0, key{}
	for k, n := range admitted {
		q := ceiling
		if k.bucket != quota.CeilingBucket {
			q = classes[k.bucket]
		}
		bound := float64(q.Capacity) + q.RefillPerSecond*elapsed.Seconds()
		if float64(n) > bound {
			t.Errorf("tenant %s bucket %s admitted %d tokens in %v, bound %.1f", k.tenant, k.bucket, n, elapsed, bound)
		}
		if r := float64(n) / bound; r > worst {
			worst, worstKey = r, k
		}
	}
	t.Logf("%d checks in %v (%.0f/s), %d tenant buckets; highest admitted/bound %.3f (%s/%s)",
		calls, elapsed.Round(time.Millisecond), float64(calls)/elapsed.Seconds(), len(admitted), worst, worstKey.tenant, worstKey.bucket)
	if worst < 0.5 {
		t.Fatalf("no tenant came near its bound (%.2f): the soak did not exercise the limiter", worst)
	}
}
