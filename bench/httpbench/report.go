package main

import (
	"fmt"
	"slices"
	"strings"
)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cell is the medians of one configuration at one load and connection
// count.
type cell struct {
	rps, p50, p99, share, cpu float64
	socket, other, degraded   int64 // totals over the repetitions
}

func medians(runs []run, config, load string, conns int) (cell, bool) {
	var rps, p50, p99, share, cpu []float64
	var c cell
	for _, r := range runs {
		if r.config == config && r.load == load && r.conns == conns {
			c.socket, c.other, c.degraded = c.socket+r.wrk.SocketErrors, c.other+r.other, c.degraded+r.degraded
			rps, p50, p99 = append(rps, r.wrk.RPS), append(p50, r.wrk.P50), append(p99, r.wrk.P99)
			share, cpu = append(share, r.share429), append(cpu, r.cpuPerReq)
		}
	}
	if len(rps) == 0 {
		return cell{}, false
	}
	c.rps, c.p50, c.p99, c.share, c.cpu = median(rps), median(p50), median(p99), median(share), median(cpu)
	return c, true
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// summary is the Markdown report: medians per configuration, ratios
// against no limiter and against ulule, the accuracy probes, and the
// targets checked.
func summary(cfgs []string, many string, conns []int, runs []run, acc []accuracy, rtt float64) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var errs, degraded, gone int64
	for _, r := range runs {
		errs += r.wrk.SocketErrors + r.other
		degraded += r.degraded
		gone += r.gone
	}
	for _, load := range []string{many, "1"} {
		if load == "1" {
			p("\n### One hot tenant (almost every request denied)\n\n")
		} else {
			p("\n### %s tenants (pre-minted JWTs rotated by a wrk script)\n\n", many)
		}
		p("| conns | config | req/s | x none | x one-get | x ulule | p50 µs | p99 µs | 429 share | Redis CPU µs/req | x ulule | errors s/o/l |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, n := range conns {
			none, _ := medians(runs, "none", load, n)
			og, _ := medians(runs, "one-get", load, n)
			ul, _ := medians(runs, "ulule", load, n)
			for _, c := range cfgs {
				m, ok := medians(runs, c, load, n)
				if !ok {
					continue
				}
				cpu, cpuRatio := fmt.Sprintf("%.2f", m.cpu), ratio(m.cpu, ul.cpu)
				if c == "none" {
					cpu, cpuRatio = "–", "–"
				}
				p("| %d | %s | %.0f | %s | %s | %s | %.0f | %.0f | %.3f | %s | %s | %d/%d/%d |\n",
					n, c, m.rps, ratio(m.rps, none.rps), ratio(m.rps, og.rps), ratio(m.rps, ul.rps), m.p50, m.p99, m.share, cpu, cpuRatio, m.socket, m.other, m.degraded)
			}
		}
	}
	if *flagDelay > 0 {
		p("\n### Latency added to a request, against none, with Redis %v away each way\n\n", *flagDelay)
		p("The link's round trip, measured as the median of 500 PINGs through it less 500 direct ones: **%.0f µs** (nominal %v). ", rtt, 2**flagDelay)
		p("Added = the configuration's median p50 (p99) less none's, same load and connections.\n\n")
		p("| tenants | conns | config | p50 µs | added p50 µs | added p50 / round trip | p99 µs | added p99 µs |\n|---|---|---|---|---|---|---|---|\n")
		for _, load := range []string{many, "1"} {
			for _, n := range conns {
				none, _ := medians(runs, "none", load, n)
				for _, c := range cfgs {
					m, ok := medians(runs, c, load, n)
					if !ok || c == "none" {
						continue
					}
					p("| %s | %d | %s | %.0f | %.0f | %s | %.0f | %.0f |\n", load, n, c, m.p50, m.p50-none.p50, ratio(m.p50-none.p50, rtt), m.p99, m.p99-none.p99)
				}
			}
		}
	}

	p("\n### Accuracy: one tenant across %d replicas behind a round-robin balancer\n\n", *flagReplicas)
	p("One request at t=0, idle until %v before ulule's %v window ends, then 32 workers until %v after it. ", probeLead, window, probeLead)
	p("Bucket bound = %d + %d/s x elapsed (tollgate; redis_rate is GCRA, the same bound). ", capacity, refill)
	p("ulule's fixed window allows %d per window: 2 x %d across the boundary.\n\n", capacity, capacity)
	p("tollgate-leases holds at most %d tokens per replica outside the store (leases of at most %d for %v): over the probe, from a full bucket, it never admits more than the bucket's bound; over the burst, at most %d x %d = %d more. ",
		leaseSize, leaseSize, *flagLeaseTTL, *flagReplicas, leaseSize, *flagReplicas*leaseSize)
	p("\"Above the bound at\" is the first admission, by its arrival at the prober, beyond %d + %d/s x its arrival time (– for none).\n\n", capacity, refill)
	p("| config | admitted | elapsed s | bucket bound | allowed by its algorithm | admitted in the burst | burst s | bucket bound for the burst (+ overshoot) | above the bound at | sent | limiter errors |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cfgs {
		for _, a := range acc {
			if a.config == c {
				over := "–"
				if i := a.firstOver(); i >= 0 {
					over = fmt.Sprintf("#%d, %.2f s", i+1, a.times[i])
				}
				bb := fmt.Sprintf("%.0f", a.burstBound())
				if a.overshoot() > 0 {
					bb += fmt.Sprintf(" + %.0f", a.overshoot())
				}
				p("| %s | %d | %.2f | %.0f | %.0f | %d | %.2f | %s | %s | %d | %d |\n",
					c, a.admitted, a.elapsed, a.bound(), a.allowed(), a.burst, a.burstDur, bb, over, a.sent, a.degraded)
			}
		}
	}

	p("\n### Targets (medians of this run)\n\n")
	check := func(ok bool, format string, args ...any) {
		mark := "met"
		if !ok {
			mark = "NOT MET"
		}
		p("- %s: %s\n", mark, fmt.Sprintf(format, args...))
	}
	if slices.Contains(cfgs, "tollgate") && slices.Contains(cfgs, "ulule") && slices.Contains(cfgs, "none") {
		for _, n := range conns {
			tg, _ := medians(runs, "tollgate", many, n)
			ul, _ := medians(runs, "ulule", many, n)
			none, _ := medians(runs, "none", many, n)
			check(tg.rps >= 0.95*ul.rps, "%s tenants, %d conns: tollgate %.0f req/s = %.2fx ulule (want >= 0.95)", many, n, tg.rps, tg.rps/ul.rps)
			check(tg.rps >= 0.85*none.rps, "%s tenants, %d conns: tollgate = %.2fx no limiter (want >= 0.85)", many, n, tg.rps/none.rps)
			check(tg.cpu <= ul.cpu, "%s tenants, %d conns: tollgate Redis CPU %.2f µs/req vs ulule %.2f (want <=)", many, n, tg.cpu, ul.cpu)
		}
	}
	if slices.Contains(cfgs, "tollgate") && slices.Contains(cfgs, "one-get") {
		for _, load := range []string{many, "1"} {
			for _, n := range conns {
				tg, _ := medians(runs, "tollgate", load, n)
				og, _ := medians(runs, "one-get", load, n)
				want := 1.0
				if n < 64 {
					want = 0.9
				}
				check(tg.rps >= want*og.rps, "%s tenants, %d conns: tollgate = %.2fx one-get (want >= %.1f)", load, n, tg.rps/og.rps, want)
			}
		}
	}
	if slices.Contains(cfgs, "tollgate-leases") && slices.Contains(cfgs, "none") {
		for _, n := range conns {
			if n < 64 {
				continue
			}
			tl, _ := medians(runs, "tollgate-leases", many, n)
			none, _ := medians(runs, "none", many, n)
			check(tl.rps >= 0.85*none.rps, "%s tenants, %d conns: tollgate-leases = %.2fx no limiter (want >= 0.85)", many, n, tl.rps/none.rps)
		}
	}
	if *flagDelay > 0 && slices.Contains(cfgs, "tollgate") && slices.Contains(cfgs, "none") {
		for _, load := range []string{many, "1"} {
			for _, n := range conns {
				none, _ := medians(runs, "none", load, n)
				tg, _ := medians(runs, "tollgate", load, n)
				added := tg.p50 - none.p50
				check(added <= 1.1*rtt, "%s tenants, %d conns, Redis %v away: tollgate adds %.0f µs to p50 = %.2f round trips (want <= 1.10)", load, n, *flagDelay, added, added/rtt)
				for _, other := range []string{"ulule", "redis_rate"} {
					if o, ok := medians(runs, other, load, n); ok {
						check(added < o.p50-none.p50, "%s tenants, %d conns: tollgate's added p50 %.0f µs below %s's %.0f", load, n, added, other, o.p50-none.p50)
					}
				}
			}
		}
	}
	// A limiter error decides by the failure policy; tollgate's default
	// fails open, admitting that request (cost 1) without the store. The
	// store's own decisions are the admitted minus those.
	for _, c := range []string{"tollgate", "tollgate-leases", "redis_rate", "ulule"} {
		var n, over, overStore int
		var errs int64
		worst, worstBurst := 0.0, 0.0 // largest admitted / bound
		for _, a := range acc {
			if a.config != c {
				continue
			}
			n++
			errs += a.degraded
			if float64(a.admitted) > a.bound() || float64(a.burst) > a.burstBound()+a.overshoot() || a.firstOver() >= 0 {
				over++
			}
			if float64(a.admitted-a.degraded) > a.bound() || float64(a.burst-a.degraded) > a.burstBound()+a.overshoot() {
				overStore++
			}
			worst = max(worst, float64(a.admitted)/a.bound())
			worstBurst = max(worstBurst, float64(a.burst)/a.burstBound())
		}
		if n == 0 {
			continue
		}
		if c == "ulule" {
			p("- ulule at the window boundary: up to %.2fx the bucket's bound for the burst's interval, in %d of %d probes over it\n", worstBurst, over, n)
			continue
		}
		bound := "the bucket's bound"
		if c == "tollgate-leases" {
			bound = fmt.Sprintf("the bucket's bound from the start, nor the burst's bound + %d x %d leased", *flagReplicas, leaseSize)
		}
		check(over == 0, "%s across replicas never above %s, at any admission: %d of %d probes over it; at most %.3fx the bound over the probe, %.3fx the bucket's over the burst; %d limiter errors",
			c, bound, over, n, worst, worstBurst, errs)
		check(overStore == 0, "%s across replicas, the store's decisions alone (admitted minus limiter errors): %d of %d probes over the bound", c, overStore, n)
	}
	for _, c := range cfgs {
		if !limits(c) {
			continue
		}
		var n, over, overStore int
		var worst run
		for _, r := range runs {
			if r.config == c && r.load == "1" {
				n++
				if r.overBound() {
					over++
					if r.admitted > worst.admitted {
						worst = r
					}
				}
				if float64(r.admitted-r.degraded) > capacity+refill*r.wall {
					overStore++
				}
			}
		}
		if n == 0 {
			continue
		}
		msg := fmt.Sprintf("%s, hot tenant, one process: %d of %d throughput runs admitted more than capacity + refill x run", c, over, n)
		if over > 0 {
			msg += fmt.Sprintf("; worst %d admitted in %.1f s (bound %.0f), %d limiter errors in that run", worst.admitted, worst.wall, capacity+refill*worst.wall, worst.degraded)
		}
		check(over == 0, "%s", msg)
		check(overStore == 0, "%s, hot tenant, the store's decisions alone (admitted minus limiter errors): %d of %d runs over the bound", c, overStore, n)
	}
	check(errs == 0, "no socket errors and no answers other than 200/429 (%d)", errs)
	p("- limiter errors in the throughput runs, all configurations: %d (errors s/o/l: wrk socket errors / statuses other than 200 and 429 / limiter errors, totals over the repetitions)\n", degraded)
	p("- requests whose client had gone when they were answered (wrk closing its connections at the end of a run; counted as neither): %d\n", gone)
	return b.String()
}
