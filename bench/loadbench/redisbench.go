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

// redisBenchmark runs redis-benchmark with pipeline depth p on the script:
// the server's ceiling, with a client that costs almost nothing.
func redisBenchmark(ctx context.Context, client *redis.Client, addr, sha, prefix string, p, tenants int) (result, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return result{}, err
	}
	key := prefix + "rb:{hot}:default"
	args := []string{"-h", host, "-p", port, "-c", "50", "-P", strconv.Itoa(p), "--csv"}
	if tenants > 1 {
		key = prefix + "rb:{__rand_int__}:default"
		args = append(args, "-r", strconv.Itoa(tenants))
	}
	// about the same length as a throughput measurement
	n := int(max(20000, 120000*p/16*int(flagDuration.Seconds())))
	if p == 1 {
		n = int(60000 * flagDuration.Seconds())
	}
	args = append(args, "-n", strconv.Itoa(n), "EVALSHA", sha, "1", key, "", "1", strconv.Itoa(capacity), strconv.Itoa(rate), strconv.Itoa(capacity*1000/rate+1000))
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, err
	}
	cpu0, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	cpu1, err := serverCPU(ctx, client)
	if err != nil {
		return result{}, err
	}
	usec, calls, err := commandStats(ctx, client)
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
	impl := "redis-benchmark-P" + strconv.Itoa(p)
	if calls == 0 {
		calls = 1
	}
	return result{
		name: fmt.Sprintf("Load/tenants=%s/c=50/impl=%s", tname, impl), impl: impl, conc: 50, tenant: tenants,
		ops: num(rec[1]), p50: num(rec[4]) * 1000, p99: num(rec[6]) * 1000,
		cpu: (cpu1 - cpu0) * 1e6 / calls, cmd: usec / calls, calls: 1,
	}, nil
}
