package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// garbageStates are stored values the scripts never write: unparsable,
// non-finite, below -2^50 (the deepest debt the settle script writes) or
// above capacity (10). "<now>" is replaced by the
// clock's current stamp.
var garbageStates = []string{
	"nan <now>", "-nan <now>", "inf <now>", "-inf <now>", "1e400 <now>",
	"0 nan", "0 inf", "0 -inf", "0 1e400", "5 -nan",
	"-1125899906842625 <now>", "-2e16 <now>", "11 <now>", "0x10 <now>", "10.000001 <now>",
	"", "5", "abc", "x <now>", "5 x", "5 <now> junk", " <now>", "5 ",
}

// TestGarbageStateStartsFull: a bucket whose stored value is garbage (written
// by hand, by another program, or corrupted) is treated as a full bucket and
// rewritten with a valid state on the next charge. Lua's tonumber accepts
// "nan" and "inf", so without the checks a stored NaN admits everything
// forever and a stored NaN or negative stamp denies forever. A peek reports
// the bucket full and writes nothing. Single- and multi-bucket paths alike.
func TestGarbageStateStartsFull(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	ceiling := quota.Bucket{Name: quota.CeilingBucket, Quota: quota.Quota{Capacity: 100, RefillPerSecond: 10}}
	for _, multi := range []bool{false, true} {
		name := "single"
		buckets := []quota.Bucket{{Name: "default", Quota: q}}
		if multi {
			name = "multi"
			buckets = append(buckets, ceiling)
		}
		t.Run(name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, be backend, vr variant) {
				c := be.client(t)
				ctx := context.Background()
				clock := testkit.NewFakeClock()
				l := vr.newLimiter(t, c, staticResolver(buckets...), core.WithClock(clock.Now))
				for i, g := range garbageStates {
					t.Run(strconv.Quote(g), func(t *testing.T) {
						tenant := "g" + strconv.Itoa(i)
						now := strconv.FormatInt(clock.Now().UnixMicro(), 10)
						v := g
						if len(v) >= 5 && v[len(v)-5:] == "<now>" {
							v = v[:len(v)-5] + now
						} else if len(v) > 11 && v[len(v)-10:] == "<now> junk" {
							v = v[:len(v)-10] + now + " junk"
						}
						keys := make([]string, len(buckets))
						for j, b := range buckets {
							keys[j], _ = l.Keys().Bucket(tenant, b.Name)
							if err := c.Set(ctx, keys[j], v, 0).Err(); err != nil {
								t.Fatal(err)
							}
						}
						d := check(t, l, tenant, 0)
						if !d.Allowed || d.Buckets[0].Tokens != 10 {
							t.Fatalf("%q: peek = %+v, want a full bucket", g, d)
						}
						if got, _ := c.Get(ctx, keys[0]).Result(); got != v {
							t.Fatalf("%q: a peek wrote %q", g, got)
						}
						for k := range 2 {
							d = check(t, l, tenant, 1)
							if !d.Allowed || d.Buckets[0].Tokens != float64(9-k) || d.Remaining != int64(9-k) {
								t.Fatalf("%q: charge %d = %+v, want allowed with %d left", g, k+1, d, 9-k)
							}
						}
						if tok, _ := stored(t, c, keys[0]); tok != 8 {
							t.Fatalf("%q: stored tokens %v after two charges, want 8", g, tok)
						}
						for _, k := range keys {
							if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
								t.Fatalf("%q: PTTL %s = %v, %v: the rewrite set no TTL", g, k, ttl, err)
							}
						}
						// the bucket is enforced again: 8 more, then a denial
						for range 8 {
							check(t, l, tenant, 1)
						}
						if d = check(t, l, tenant, 1); d.Allowed || d.Reason != core.ReasonOverLimit || d.RetryAfter != 500*time.Millisecond {
							t.Fatalf("%q: 11th charge = %+v, want denied, retry 500ms", g, d)
						}
					})
				}
			})
		})
	}
}
