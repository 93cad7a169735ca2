package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// The limiter works with any go-redis UniversalClient. Standalone and Cluster
// are covered everywhere; these cover a Ring and a Sentinel failover client.

func TestRingClient(t *testing.T) {
	a, b := redistest.NewServer(t), redistest.NewServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	class := quota.Bucket{Name: "export", Quota: quota.Quota{Capacity: 10, RefillPerSecond: 0.01}}
	ceiling := quota.Bucket{Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: 5, RefillPerSecond: 0.01}}
	l := newLimiter(t, ring, staticResolver(class, ceiling))
	// many tenants: they spread over both shards, and each tenant's two
	// keys share its hash tag, so the script always finds both on one shard
	for i := range 40 {
		tn := quota.Tenant{ID: "tenant-" + strconv.Itoa(i)}
		for j := range 6 {
			d, err := l.Allow(context.Background(), tn, "export", 1)
			if err != nil {
				t.Fatalf("ring: %v", err)
			}
			if d.Allowed != (j < 5) {
				t.Fatalf("tenant %d request %d: %+v", i, j, d)
			}
		}
	}
	for _, s := range []*redistest.Server{a, b} {
		n, err := s.Client(t).DBSize(context.Background()).Result()
		if err != nil || n == 0 {
			t.Fatalf("shard %s holds %d keys (%v): the ring did not spread tenants", s.Addr(), n, err)
		}
	}
}

func TestSentinelFailoverClient(t *testing.T) {
	master := redistest.NewServer(t)
	sentinel := startSentinel(t, master.Port())
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "tollgate", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = c.Close() })
	l := newLimiter(t, c, staticResolver(quota.Bucket{Name: "default", Quota: quota.Quota{Capacity: 3, RefillPerSecond: 0.01}}))
	for i := range 4 {
		d, err := l.Allow(context.Background(), quota.Tenant{ID: "t1"}, "default", 1)
		if err != nil {
			t.Fatalf("through Sentinel: %v", err)
		}
		if d.Allowed != (i < 3) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
}

// startSentinel starts a Sentinel monitoring 127.0.0.1:port as "tollgate"
// and returns its address once it knows the master.
func startSentinel(t *testing.T, masterPort int) string {
	t.Helper()
	addr := redistest.NewSentinel(t, "tollgate", "127.0.0.1:"+strconv.Itoa(masterPort)).Addr()
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := sc.GetMasterAddrByName(ctx, "tollgate").Result()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s not ready: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
