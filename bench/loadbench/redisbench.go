package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// floorScript is the least any token bucket kept on the server's clock must
// do per call: read the key, read the clock, write a value back with a TTL.
// It takes tollgate's arguments (ARGV[5] is the TTL), so both run from the
// same redis-benchmark command line, and its Redis CPU per call is the floor
// that tollgate's script is compared with.
const floorScript = `local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
redis.call('SET', KEYS[1], t[1] .. ' ' .. t[2], 'PX', ARGV[5])
return 1`

type rbRun struct {
	sha, impl string
	p         int
}

// rbRuns lists the redis-benchmark runs of one round: tollgate's script and
// the floor with -P 16, interleaved, then tollgate's script with -P 1.
func rbRuns(sha, floorSHA string) []rbRun {
	return []rbRun{{sha, "redis-benchmark-P16", 16}, {floorSHA, floorImpl, 16}, {sha, "redis-benchmark-P1", 1}}
}

const floorImpl = "floor-P16"

// redisBenchmark runs redis-benchmark with pipeline depth p on the script
// sha (reported as impl): the server's ceiling, with a client that costs
// almost nothing.
func redisBenchmark(ctx context.Context, client *redis.Client, addr, sha, impl, prefix string, p, tenants int) (result, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return result{}, err
	}
	key := prefix + impl + ":{hot}:default"
	args := []string{"-h", host, "-p", port, "-c", "50", "-P", strconv.Itoa(p), "--csv"}
	if tenants > 1 {
		key = prefix + impl + ":{__rand_int__}:default"
		args = append(args, "-r", strconv.Itoa(tenants))
	}
	// about the same length as a throughput measurement
	n := int(max(20000, 120000*p/16*int(flagDuration.Seconds())))
	if p == 1 {
		n = int(60000 * flagDuration.Seconds())
	}
	args = append(args, "-n", strconv.Itoa(n), "EVALSHA", sha, "1", key, "", "1", strconv.Itoa(capacity), strconv.Itoa(rate), strconv.Itoa(capacity*1000/rate+1000))
	var out []byte
	cost, err := redisSpent(ctx, client, func() error {
		var err error
		if out, err = exec.CommandContext(ctx, "redis-benchmark", args...).Output(); err != nil {
			return fmt.Errorf("redis-benchmark: %w", err)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	var rec []string
	r := csv.NewReader(bufio.NewReader(strings.NewReader(string(out))))
	r.FieldsPerRecord = -1
	for {
		x, err := r.Read()
		if err != nil {
			break
		}
		if len(x) >= 7 && x[0] != "test" {
			rec = x
		}
	}
	if rec == nil {
		return result{}, fmt.Errorf("redis-benchmark: no result in %q", out)
	}
	num := func(s string) float64 { x, _ := strconv.ParseFloat(s, 64); return x }
	tname := "10k"
	if tenants == 1 {
		tname = "hot"
	}
	calls := cost.calls
	if calls == 0 {
		calls = 1
	}
	return result{
		name: fmt.Sprintf("Load/tenants=%s/c=50/impl=%s", tname, impl), impl: impl, conc: 50, tenant: tenants,
		ops: num(rec[1]), p50: num(rec[4]) * 1000, p99: num(rec[6]) * 1000,
		cpu: cost.cpu * 1e6 / calls, cmd: cost.usec / calls, calls: 1,
	}, nil
}
