package main

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tollgate-go/tollgate/bench/internal/stats"
)

// summary prints a Markdown table of medians, with ratios against
// redis_rate measured in the same run.
func summary(impls []string, concs, tenantCounts []int, mem []memResult) {
	med := func(impl string, conc, tenants int, f func(result) float64) float64 {
		var xs []float64
		for _, r := range results {
			if r.impl == impl && r.tenant == tenants && (r.conc == conc || conc == 0) {
				xs = append(xs, f(r))
			}
		}
		return stats.Median(xs)
	}
	ops := func(r result) float64 { return r.ops }
	cpu := func(r result) float64 { return r.cpu }
	fmt.Printf("\n## Summary (medians of %d runs; ratios against redis_rate in the same run)\n", *flagCount)
	for _, tenants := range tenantCounts {
		tname := strconv.Itoa(tenants) + " tenants"
		if tenants == 1 {
			tname = "one hot tenant"
		}
		fmt.Printf("\n### %s\n\n", tname)
		fmt.Println("| callers | implementation | ops/s | x redis_rate | p50 µs | p99 µs | Redis CPU µs/decision | x redis_rate | cmd µs/decision | script calls/decision |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range concs {
			base, baseCPU := med("redis_rate", c, tenants, ops), med("redis_rate", c, tenants, cpu)
			for _, impl := range impls {
				o, u := med(impl, c, tenants, ops), med(impl, c, tenants, cpu)
				fmt.Printf("| %d | %s | %.0f | %.2f | %.0f | %.0f | %.2f | %.2f | %.2f | %.3f |\n", c, impl, o, o/base,
					med(impl, c, tenants, func(r result) float64 { return r.p50 }),
					med(impl, c, tenants, func(r result) float64 { return r.p99 }),
					u, u/baseCPU, med(impl, c, tenants, func(r result) float64 { return r.cmd }),
					med(impl, c, tenants, func(r result) float64 { return r.calls }))
			}
		}
		if *flagRB {
			for _, rb := range rbRuns("", "") {
				impl := rb.impl
				fmt.Printf("| 50 | %s | %.0f | | %.0f | %.0f | %.2f | | %.2f | 1 |\n", impl, med(impl, 0, tenants, ops),
					med(impl, 0, tenants, func(r result) float64 { return r.p50 }), med(impl, 0, tenants, func(r result) float64 { return r.p99 }),
					med(impl, 0, tenants, cpu), med(impl, 0, tenants, func(r result) float64 { return r.cmd }))
			}
		}
	}
	if *flagRB {
		fmt.Printf("\n### The script against the floor (redis-benchmark -P 16, same run)\n\n")
		for _, tenants := range tenantCounts {
			cmd := func(r result) float64 { return r.cmd }
			tname := strconv.Itoa(tenants) + " tenants"
			if tenants == 1 {
				tname = "one hot tenant"
			}
			fmt.Printf("- %s: Redis CPU per call %.2fx the floor's (%.2f vs %.2f µs; target <= 1.2), commandstats µs per call %.2fx\n", tname,
				med("redis-benchmark-P16", 0, tenants, cpu)/med(floorImpl, 0, tenants, cpu), med("redis-benchmark-P16", 0, tenants, cpu), med(floorImpl, 0, tenants, cpu),
				med("redis-benchmark-P16", 0, tenants, cmd)/med(floorImpl, 0, tenants, cmd))
		}
	}
	// the performance targets, at 10k tenants when measured
	t := tenantCounts[len(tenantCounts)-1]
	best := ""
	for _, impl := range impls {
		// leases and the deny cache change what is measured (fewer store
		// calls): the targets are for one store call per decision
		if (impl == "tollgate-batched" || impl == "tollgate-default") && (best == "" || med(impl, 256, t, ops) > med(best, 256, t, ops)) {
			best = impl
		}
	}
	if best != "" && slices.Contains(concs, 256) && slices.Contains(concs, 1) {
		fmt.Printf("\n### Targets (%d tenants, %s at 256 callers)\n\n", t, best)
		fmt.Printf("- throughput at 256 callers: %.2fx redis_rate (target >= 2.0)\n", med(best, 256, t, ops)/med("redis_rate", 256, t, ops))
		if *flagRB {
			fmt.Printf("- throughput at 256 callers: %.2fx redis-benchmark -P 16 (target >= 1.0)\n", med(best, 256, t, ops)/med("redis-benchmark-P16", 0, t, ops))
		}
		fmt.Printf("- Redis CPU per decision at 256 callers: %.2fx redis_rate (target <= 0.6)\n", med(best, 256, t, cpu)/med("redis_rate", 256, t, cpu))
		for _, impl := range []string{"tollgate", "tollgate-batched", "tollgate-default"} {
			if slices.Contains(impls, impl) {
				fmt.Printf("- single-caller p50, %s: %.2fx raw EVALSHA (target <= 1.1)\n", impl,
					med(impl, 1, t, func(r result) float64 { return r.p50 })/med("evalsha", 1, t, func(r result) float64 { return r.p50 }))
			}
		}
	}
	if len(mem) > 0 {
		mm := func(impl string, f func(memResult) float64) float64 {
			var xs []float64
			for _, m := range mem {
				if m.impl == impl {
					xs = append(xs, f(m))
				}
			}
			return stats.Median(xs)
		}
		d := func(m memResult) float64 { return m.delta }
		u := func(m memResult) float64 { return m.usage }
		fmt.Printf("\n### Memory (%d buckets, keys of equal length)\n\n| implementation | used_memory delta B/bucket | MEMORY USAGE B/key |\n|---|---|---|\n", *flagBuckets)
		for _, impl := range []string{"tollgate", "redis_rate"} {
			fmt.Printf("| %s | %.1f | %.1f |\n", impl, mm(impl, d), mm(impl, u))
		}
		fmt.Printf("\n- bytes per bucket: %.2fx redis_rate (target <= 1.0)\n", mm("tollgate", d)/mm("redis_rate", d))
	}
}
