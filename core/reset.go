package core

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core/quota"
)

// Reset deletes tenant t's buckets, which then start full, and their
// concurrency slots, which are then all free, and returns how many keys it
// deleted (0 when the buckets were already full and no slot was held). With
// bucket names it deletes just those; with none, every bucket of the tenant
// (a SCAN over the tenant's keys; on a Cluster, on the one master that holds
// the tenant's slot).
func (l *Limiter) Reset(ctx context.Context, t quota.Tenant, buckets ...string) (int64, error) {
	var keys []string
	for _, b := range buckets {
		k, err := l.keys.Bucket(t.ID, b)
		if err != nil {
			return 0, err
		}
		sk, err := l.keys.Slots(t.ID, b)
		if err != nil {
			return 0, err
		}
		keys = append(keys, k, sk)
	}
	pattern, err := l.keys.TenantPattern(t.ID)
	if err != nil {
		return 0, err
	}
	if len(buckets) == 0 {
		var node redis.Cmdable = l.client
		if cc, ok := l.client.(*redis.ClusterClient); ok {
			// the pattern's hash tag is the tenant's: every key of the
			// tenant is in its slot, so only that slot's master has them
			m, err := cc.MasterForKey(ctx, pattern)
			if err != nil {
				return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
			}
			node = m
		}
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
		}
	}
	if l.path.deny != nil {
		l.path.deny.Forget(pattern[:len(pattern)-1])
	}
	if l.path.leases != nil {
		l.path.leases.Forget(pattern[:len(pattern)-1])
	}
	if len(keys) == 0 {
		return 0, nil
	}
	// one slot, so one DEL is valid on a Cluster too
	n, err := l.client.Del(ctx, keys...).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: reset: %w", ErrStore, err)
	}
	return n, nil
}
