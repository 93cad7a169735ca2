package grafana

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Eval evaluates n at scrapes[i] over the scrapes before it, as Prometheus
// would over the same samples, approximately:
//
//   - rate(m[r]) is (last - first) / (t_last - t_first) over the samples of
//     the window (t_i - r, t_i]; a series absent from an earlier scrape in
//     the window counts from 0 there (it was born inside the window), where
//     Prometheus would only extrapolate; a counter reset (the value going
//     down) counts the new value as the increase. No extrapolation to the
//     window's edges; a window holding one scrape (a late scrape) is
//     widened to the scrape before.
//   - sum by (l) sums per distinct value of l; topk keeps the k largest at
//     this instant (so the set of series can change over time, as in
//     Grafana).
//   - histogram_quantile interpolates linearly within the bucket that holds
//     the quantile, as Prometheus does; NaN when no observations.
//
// The result's samples carry the labels left after aggregation (no
// metric name after rate or an aggregation).
func Eval(n Node, scrapes []Scrape, i int) ([]Sample, error) {
	switch n := n.(type) {
	case *Selector:
		if n.Range != 0 {
			return nil, fmt.Errorf("range selector %s outside rate", n.Metric)
		}
		var out []Sample
		for _, s := range scrapes[i].Samples {
			if s.Name == n.Metric && n.Matches(s.Labels) {
				out = append(out, s)
			}
		}
		return out, nil
	case *Call:
		switch n.Func {
		case "rate":
			return rate(n.Args[0].(*Selector), scrapes, i), nil
		case "histogram_quantile":
			v, err := Eval(n.Args[1], scrapes, i)
			if err != nil {
				return nil, err
			}
			return quantile(float64(n.Args[0].(Number)), v), nil
		}
		return nil, fmt.Errorf("%s cannot be evaluated to a vector", n.Func)
	case *Agg:
		v, err := Eval(n.Expr, scrapes, i)
		if err != nil {
			return nil, err
		}
		if n.Op == "topk" {
			return topk(int(n.Param.(Number)), v), nil
		}
		return sumBy(n.By, v), nil
	}
	return nil, fmt.Errorf("cannot evaluate %T", n)
}

// key identifies a series by name and labels.
func key(s Sample) string {
	ks := make([]string, 0, len(s.Labels))
	for k, v := range s.Labels {
		ks = append(ks, k+"="+strconv.Quote(v))
	}
	slices.Sort(ks)
	return s.Name + "{" + strings.Join(ks, ",") + "}"
}

func rate(sel *Selector, scrapes []Scrape, i int) []Sample {
	now := scrapes[i].At
	first := i
	for first > 0 && now.Sub(scrapes[first-1].At) < sel.Range {
		first--
	}
	// a late scrape leaves one sample in the window: widen it to the
	// previous scrape rather than leave a gap
	if first == i && i > 0 {
		first--
	}
	type acc struct {
		s          Sample
		prev, incr float64
		seen       bool
	}
	series := map[string]*acc{}
	var order []string
	for j := first; j <= i; j++ {
		for _, s := range scrapes[j].Samples {
			if s.Name != sel.Metric || !sel.Matches(s.Labels) {
				continue
			}
			k := key(s)
			a := series[k]
			if a == nil {
				a = &acc{s: s}
				series[k] = a
				order = append(order, k)
				// born inside the window: counted from 0 if an earlier
				// scrape in it lacked the series
				if j > first {
					a.seen, a.prev = true, 0
				}
			}
			if a.seen {
				if d := s.Value - a.prev; d >= 0 {
					a.incr += d
				} else {
					a.incr += s.Value
				}
			}
			a.seen, a.prev = true, s.Value
		}
	}
	dt := now.Sub(scrapes[first].At).Seconds()
	var out []Sample
	for _, k := range order {
		a := series[k]
		if dt <= 0 {
			continue
		}
		out = append(out, Sample{Labels: a.s.Labels, Value: a.incr / dt})
	}
	return out
}

func sumBy(by []string, v []Sample) []Sample {
	groups := map[string]*Sample{}
	var order []string
	for _, s := range v {
		ls := map[string]string{}
		for _, l := range by {
			if x, ok := s.Labels[l]; ok {
				ls[l] = x
			}
		}
		k := key(Sample{Labels: ls})
		g := groups[k]
		if g == nil {
			g = &Sample{Labels: ls}
			groups[k] = g
			order = append(order, k)
		}
		g.Value += s.Value
	}
	out := make([]Sample, len(order))
	for i, k := range order {
		out[i] = *groups[k]
	}
	return out
}

func topk(k int, v []Sample) []Sample {
	v = slices.Clone(v)
	sort.SliceStable(v, func(a, b int) bool { return v[a].Value > v[b].Value })
	return v[:min(k, len(v))]
}

func quantile(q float64, v []Sample) []Sample {
	type bucket struct{ le, count float64 }
	groups := map[string][]bucket{}
	labels := map[string]map[string]string{}
	var order []string
	for _, s := range v {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		ls := map[string]string{}
		for k, x := range s.Labels {
			if k != "le" {
				ls[k] = x
			}
		}
		k := key(Sample{Labels: ls})
		if _, ok := groups[k]; !ok {
			order = append(order, k)
			labels[k] = ls
		}
		groups[k] = append(groups[k], bucket{le, s.Value})
	}
	var out []Sample
	for _, k := range order {
		bs := groups[k]
		slices.SortFunc(bs, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
		total := bs[len(bs)-1].count
		val := math.NaN()
		if total > 0 && math.IsInf(bs[len(bs)-1].le, 1) {
			rank := q * total
			for j, b := range bs {
				if b.count < rank {
					continue
				}
				switch {
				case math.IsInf(b.le, 1):
					// in the +Inf bucket: the highest finite bound
					val = bs[max(j-1, 0)].le
				default:
					lo, below := 0.0, 0.0
					if j > 0 {
						lo, below = bs[j-1].le, bs[j-1].count
					}
					if b.count == below {
						val = b.le
					} else {
						val = lo + (b.le-lo)*(rank-below)/(b.count-below)
					}
				}
				break
			}
		}
		out = append(out, Sample{Labels: labels[k], Value: val})
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
