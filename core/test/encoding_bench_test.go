package core_test

import (
	"context"
	_ "embed"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/lua"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

//go:embed testdata/tokenbucket_hash.lua
var tokenBucketHashSource string

// BenchmarkEncoding compares the packed-string encoding the script uses with
// the hash encoding of the design document, on a private Redis so that the
// server's own counters (INFO commandstats, used_memory) measure only this
// benchmark: server time per call, allowed and denied, and bytes per bucket.
//
//	cd core/test && go test -run '^$' -bench Encoding -count 5 . | benchstat -
func BenchmarkEncoding(b *testing.B) {
	ctx := context.Background()
	// a fill time of an hour: no bucket expires while memory is measured
	q := quota.Quota{Capacity: 36000, RefillPerSecond: 10}
	// the key TTL the limiter sends: the time to fill the bucket, plus a second
	ttl := strconv.FormatInt(int64(math.Ceil(float64(q.Capacity)/q.RefillPerSecond*1000)+1000), 10)
	for _, enc := range []struct {
		name string
		s    *redis.Script
	}{{"packed", redis.NewScript(lua.TokenBucket())}, {"hash", redis.NewScript(tokenBucketHashSource)}} {
		// a server of its own per encoding: memory is measured on a clean one
		srv := redistest.NewServer(b)
		c := srv.Client(b)
		args := func(cost int64) []any {
			return []any{"", strconv.FormatInt(cost, 10), strconv.FormatInt(q.Capacity, 10),
				strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64), ttl}
		}
		run := func(b *testing.B, key string, cost int64) {
			if err := enc.s.Run(ctx, c, []string{key}, args(cost)...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(enc.name+"/memory", func(b *testing.B) {
			const n = 20000
			prefix := redistest.Prefix(b)
			before := usedMemory(b, c)
			for i := range n {
				run(b, prefix+":{tenant-"+strconv.Itoa(i)+"}:default", 1)
			}
			after := usedMemory(b, c)
			for b.Loop() {
			}
			b.ReportMetric(float64(after-before)/n, "bytes/bucket")
		})
		b.Run(enc.name+"/allowed", func(b *testing.B) {
			prefix := redistest.Prefix(b)
			run(b, prefix, 1) // load the script
			resetStats(b, c)
			i := 0
			for b.Loop() {
				run(b, prefix+":{t"+strconv.Itoa(i%10000)+"}:d", 1)
				i++
			}
			b.ReportMetric(serverMicros(b, c), "server-µs/op")
		})
		b.Run(enc.name+"/denied", func(b *testing.B) {
			key := redistest.Prefix(b) + ":{hot}:d"
			run(b, key, q.Capacity) // drain
			resetStats(b, c)
			for b.Loop() {
				run(b, key, 50)
			}
			b.ReportMetric(serverMicros(b, c), "server-µs/op")
		})
	}
}

func resetStats(b *testing.B, c *redis.Client) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// serverMicros is the server's own time per EVALSHA call.
func serverMicros(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_evalsha:"), ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
	}
	b.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
