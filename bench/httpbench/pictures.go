package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate-go/tollgate/bench/internal/svgplot"
)

// pictures draws the run's figures into dir: requests/s against none and
// against one-get as bars per load, the last round's accuracy probes as
// admissions over time against the bucket's bound, and, with -delay, the
// p50 each configuration adds to none. A delayed run's files start with
// "delay-", so that both runs' pictures live side by side.
func pictures(dir string, cfgs []string, many string, conns []int, runs []run, acc []accuracy, rtt float64) error {
	prefix, where := "", "Redis on loopback"
	if *flagDelay > 0 {
		prefix, where = "delay-", fmt.Sprintf("Redis %v away each way", *flagDelay)
	}
	groups := make([]string, len(conns))
	for i, n := range conns {
		groups[i] = strconv.Itoa(n) + " conns"
	}
	// one colour per configuration in every picture
	colour := func(c string) string {
		all := append(append([]string(nil), configs...), extraConfigs...)
		return svgplot.Color(slices.Index(all, c))
	}
	colours := func(cs []string) []string {
		var out []string
		for _, c := range cs {
			out = append(out, colour(c))
		}
		return out
	}
	loadName := func(load string) string {
		if load == "1" {
			return "one hot tenant"
		}
		return many + " tenants"
	}
	bars := func(load, base string, skip map[string]bool) svgplot.Bars {
		var series []string
		for _, c := range cfgs {
			if !skip[c] {
				series = append(series, c)
			}
		}
		vals := make([][]float64, len(conns))
		for g, n := range conns {
			b, _ := medians(runs, base, load, n)
			for _, c := range series {
				m, ok := medians(runs, c, load, n)
				v := math.NaN()
				if ok && b.rps > 0 {
					v = m.rps / b.rps
				}
				vals[g] = append(vals[g], v)
			}
		}
		return svgplot.Bars{
			Title:  fmt.Sprintf("Gin service under wrk, %s, %s: requests/s x %s (medians of %d)", loadName(load), where, base, *flagCount),
			YLabel: "x " + base, Groups: groups, Series: series, Values: vals, Colors: colours(series),
			Refs: []svgplot.Ref{{Label: base, Y: 1}},
		}
	}
	for _, load := range []string{many, "1"} {
		name := "many"
		if load == "1" {
			name = "hot"
		}
		if err := svgplot.Write(filepath.Join(dir, prefix+"http-x-none-"+name+".svg"), bars(load, "none", map[string]bool{"none": true}).SVG()); err != nil {
			return err
		}
		if err := svgplot.Write(filepath.Join(dir, prefix+"http-x-one-get-"+name+".svg"), bars(load, "one-get", map[string]bool{"none": true, "one-get": true}).SVG()); err != nil {
			return err
		}
		if *flagDelay > 0 {
			var series []string
			for _, c := range cfgs {
				if c != "none" {
					series = append(series, c)
				}
			}
			vals := make([][]float64, len(conns))
			for g, n := range conns {
				none, _ := medians(runs, "none", load, n)
				for _, c := range series {
					m, _ := medians(runs, c, load, n)
					vals[g] = append(vals[g], m.p50-none.p50)
				}
			}
			b := svgplot.Bars{
				Title:  fmt.Sprintf("p50 added to a request against none, %s, %s (medians of %d)", loadName(load), where, *flagCount),
				YLabel: "added p50, µs", Groups: groups, Series: series, Values: vals, Format: "%.0f", Colors: colours(series),
				Refs: []svgplot.Ref{{Label: fmt.Sprintf("one round trip, measured: %.0f µs", rtt), Y: rtt}},
			}
			if err := svgplot.Write(filepath.Join(dir, prefix+"http-added-p50-"+name+".svg"), b.SVG()); err != nil {
				return err
			}
		}
	}
	// the accuracy probes of the last round
	last := map[string]accuracy{}
	for _, a := range acc {
		last[a.config] = a
	}
	var lines []svgplot.Series
	end, xmin := 0.0, (window - probeLead - 200*time.Millisecond).Seconds()
	for _, c := range cfgs {
		a, ok := last[c]
		if !ok {
			continue
		}
		// from xmin: the first request (at 0) and the idle time before the
		// burst are one step
		before := 0
		for _, t := range a.times {
			if t < xmin {
				before++
			}
		}
		s := svgplot.Series{Name: c, X: []float64{xmin}, Y: []float64{float64(before)}, Color: colour(c)}
		for i, t := range a.times {
			if t >= xmin {
				s.X, s.Y = append(s.X, t), append(s.Y, float64(i+1))
			}
		}
		s.X, s.Y = append(s.X, a.elapsed), append(s.Y, float64(len(a.times)))
		end = max(end, a.elapsed)
		lines = append(lines, s)
	}
	if len(lines) == 0 {
		return nil
	}
	lines = append(lines, svgplot.Series{Name: fmt.Sprintf("bucket bound: %d + %d/s x t", capacity, refill), X: []float64{xmin, end}, Y: []float64{capacity + refill*xmin, capacity + refill*end}, Dashed: true, Smooth: true, Color: "#000000"})
	// over the burst alone a bucket admits at most capacity + refill x
	// (t - b0), on top of the one request admitted before it
	b0 := (window - probeLead).Seconds()
	lines = append(lines, svgplot.Series{Name: fmt.Sprintf("over the burst: 1 + %d + %d/s x (t - %.1f)", capacity, refill, b0), X: []float64{b0, end}, Y: []float64{1 + capacity, 1 + capacity + refill*(end-b0)}, Dashed: true, Smooth: true, Color: "#888888"})
	l := svgplot.Lines{
		Title:  fmt.Sprintf("One tenant across %d replicas, %s: admissions over time (the last of %d probes)", *flagReplicas, where, *flagCount),
		XLabel: fmt.Sprintf("seconds since the first request, admitted at t = 0 (then idle; 32 workers from %v to %v)", window-probeLead, window+probeLead),
		YLabel: "requests admitted since t = 0", Series: lines, XMin: xmin,
	}
	return svgplot.Write(filepath.Join(dir, prefix+"http-accuracy.svg"), l.SVG())
}
