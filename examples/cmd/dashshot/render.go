package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/tollgate-go/tollgate/examples/grafana"
)

// series is one line of a panel: a legend and a value per scrape (NaN: no
// value then).
type series struct {
	legend string
	values []float64
}

// query runs a panel's PromQL over the run, as Grafana would: one
// query_range from the first to the last of times, a step apart.
type query func(expr string) (model.Matrix, error)

// panelData runs every target of p; a series' values are aligned on times
// (NaN: no value then).
func panelData(p grafana.Panel, q query, times []time.Time) ([]series, error) {
	var out []series
	idx := map[string]int{}
	step := times[1].Sub(times[0])
	for _, t := range p.Targets {
		m, err := q(t.Expr)
		if err != nil {
			return nil, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		for _, s := range m {
			labels := make(map[string]string, len(s.Metric))
			for k, v := range s.Metric {
				labels[string(k)] = string(v)
			}
			l := grafana.Legend(t.LegendFormat, labels)
			j, ok := idx[l]
			if !ok {
				j = len(out)
				idx[l] = j
				vals := make([]float64, len(times))
				for k := range vals {
					vals[k] = math.NaN()
				}
				out = append(out, series{legend: l, values: vals})
			}
			for _, v := range s.Values {
				k := int(v.Timestamp.Time().Sub(times[0]).Round(step) / step)
				if k >= 0 && k < len(times) {
					out[j].values[k] = float64(v.Value)
				}
			}
		}
	}
	// biggest first, so the legend leads with what matters
	slices.SortStableFunc(out, func(a, b series) int {
		if c := cmpDesc(peak(a.values), peak(b.values)); c != 0 {
			return c
		}
		return strings.Compare(a.legend, b.legend)
	})
	return out, nil
}

func peak(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		if !math.IsNaN(x) && x > m {
			m = x
		}
	}
	return m
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// Grafana's classic palette, and fixed colours for outcomes so that
// "denied" is red on every panel.
var (
	palette        = []string{"#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#FF9830", "#FADE2A", "#C0D8FF", "#96D98D", "#CA95E5"}
	outcomeColours = map[string]string{"allowed": "#73BF69", "denied": "#F2495C", "failed_open": "#FF9830", "failed_closed": "#C4162A",
		"fallback": "#FADE2A", "shadow_denied": "#B877D9", "invalid": "#8E8E8E", "p50": "#73BF69", "p99": "#FF9830"}
)

func colour(legend string, i int) string {
	if c, ok := outcomeColours[legend]; ok {
		return c
	}
	return palette[i%len(palette)]
}

// render lays the dashboard's panels out as Grafana does (24 columns) and
// draws each as an SVG chart.
func render(d *grafana.Dashboard, q query, times []time.Time, outage window, width, height int) ([]byte, error) {
	if len(times) < 2 {
		return nil, fmt.Errorf("need at least two points in time, have %d", len(times))
	}
	const header, margin, gap = 58, 12, 10
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	colW := float64(width-2*margin+gap) / 24
	rowH := float64(height-header-margin+gap) / float64(rows)
	start, last := times[0], times[len(times)-1]
	var b strings.Builder
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title><style>
body{margin:0;background:#111217;color:#ccccdc;font-family:Inter,"Helvetica Neue",Arial,sans-serif;width:%dpx;height:%dpx;overflow:hidden}
.hdr{height:%dpx;display:flex;align-items:center;padding:0 %dpx;gap:18px;border-bottom:1px solid #2a2d35;box-sizing:border-box}
.hdr h1{font-size:19px;font-weight:500;margin:0;color:#e6e6f0}
.var{font-size:12px;background:#181b1f;border:1px solid #2f3238;padding:4px 8px;border-radius:2px}
.var b{color:#8e8e9e;font-weight:400;margin-right:6px}
.note{margin-left:auto;font-size:12px;color:#8e8e9e;text-align:right;line-height:1.4}
.p{position:absolute;background:#181b1f;border:1px solid #22252b;border-radius:2px;box-sizing:border-box}
.p h2{font-size:13px;font-weight:500;margin:7px 10px 0;color:#e6e6f0;white-space:nowrap;overflow:hidden}
svg text{font-family:inherit}
</style></head><body>`, html.EscapeString(d.Title), width, height, header-4, margin)
	fmt.Fprintf(&b, `<div class="hdr"><h1>%s</h1><span class="var"><b>class</b>All</span><span class="var"><b>tier</b>All</span>`, html.EscapeString(d.Title))
	fmt.Fprintf(&b, `<span class="var"><b>window</b>%s, %s – %s</span>`, fmtDur(last.Sub(start)),
		start.Format("15:04:05"), last.Format("15:04:05"))
	b.WriteString(`<div class="note">tollgate's own rendering of the Grafana dashboard's panels (examples/cmd/dashshot),<br>` +
		`queried from a real Prometheus scraping limiters on a real Redis; not a Grafana screenshot. <span style="color:#F2495C">▮</span> Redis paused</div></div>`)
	for _, p := range d.Panels {
		x := float64(margin) + float64(p.GridPos.X)*colW
		y := float64(header) + float64(margin)/2 + float64(p.GridPos.Y)*rowH
		w := float64(p.GridPos.W)*colW - gap
		h := float64(p.GridPos.H)*rowH - gap
		data, err := panelData(p, q, times)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, `<div class="p" style="left:%.0fpx;top:%.0fpx;width:%.0fpx;height:%.0fpx"><h2>%s</h2>`, x, y, w, h, html.EscapeString(p.Title))
		b.WriteString(chart(p, data, times, outage, w-2, h-30))
		b.WriteString(`</div>`)
	}
	b.WriteString(`</body></html>`)
	return []byte(b.String()), nil
}

// chart draws one time-series panel: axes, grid, the outage band, lines
// (stacked when the panel stacks) and the legend.
func chart(p grafana.Panel, data []series, times []time.Time, outage window, w, h float64) string {
	start := times[0]
	const left, right, top = 62.0, 12.0, 8.0
	legendRows := 2
	legendH := float64(legendRows)*16 + 6
	plotH := h - top - 22 - legendH
	plotW := w - left - right
	tmax := times[len(times)-1].Sub(start).Seconds()
	xAt := func(t float64) float64 { return left + t/tmax*plotW }

	stacked := p.Stacked()
	ys := make([][]float64, len(data))
	for i, s := range data {
		ys[i] = slices.Clone(s.values)
		if stacked && i > 0 {
			for k := range ys[i] {
				prev, cur := ys[i-1][k], ys[i][k]
				if math.IsNaN(prev) {
					prev = 0
				}
				if math.IsNaN(cur) {
					cur = 0
				}
				ys[i][k] = prev + cur
			}
		}
	}
	if stacked { // draw the biggest band first, under the others
		slices.Reverse(ys)
		slices.Reverse(data)
		defer slices.Reverse(data)
	}
	ymax := 0.0
	for _, v := range ys {
		ymax = max(ymax, peak(v))
	}
	step, top1 := niceScale(ymax)
	yAt := func(v float64) float64 { return top + plotH - v/top1*plotH }
	unit := p.FieldConfig.Defaults.Unit

	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg">`, w, h, w, h)
	// y grid and labels
	for v := 0.0; v <= top1*1.0001; v += step {
		y := yAt(v)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#2c3037" stroke-width="1"/>`, left, left+plotW, y, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#9fa3ad" text-anchor="end">%s</text>`, left-6, y+4, html.EscapeString(formatValue(v, unit, step)))
	}
	// x labels every 10 s (clock time)
	tstep := 10.0
	if tmax > 120 {
		tstep = 30
	}
	for t := 0.0; t <= tmax+0.01; t += tstep {
		x := xAt(t)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#2c3037"/>`, x, x, top, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#9fa3ad" text-anchor="middle">%s</text>`, x, top+plotH+15,
			start.Add(time.Duration(t*float64(time.Second))).Format("15:04:05"))
	}
	// lines
	for i, v := range ys {
		c := colour(data[i].legend, indexOf(data, data[i].legend, stacked))
		var pts []string
		flush := func() {
			if len(pts) == 0 {
				return
			}
			if stacked {
				// fill down to the band below: approximated by a fill to zero
				// drawn before the bands above (which cover it)
				first, last := pts[0], pts[len(pts)-1]
				fx := strings.Split(first, ",")[0]
				lx := strings.Split(last, ",")[0]
				fmt.Fprintf(&b, `<polygon points="%s,%.1f %s %s,%.1f" fill="%s" fill-opacity="1"/>`, fx, yAt(0), strings.Join(pts, " "), lx, yAt(0), shade(c))
			} else {
				first, last := pts[0], pts[len(pts)-1]
				fx := strings.Split(first, ",")[0]
				lx := strings.Split(last, ",")[0]
				fmt.Fprintf(&b, `<polygon points="%s,%.1f %s %s,%.1f" fill="%s" fill-opacity="0.08"/>`, fx, yAt(0), strings.Join(pts, " "), lx, yAt(0), c)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8" stroke-linejoin="round"/>`, strings.Join(pts, " "), c)
			pts = pts[:0]
		}
		for k, y := range v {
			if math.IsNaN(y) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xAt(times[k].Sub(start).Seconds()), yAt(y)))
		}
		flush()
	}
	// the outage band
	if outage.to > outage.from {
		x0, x1 := xAt(min(outage.from.Seconds(), tmax)), xAt(min(outage.to.Seconds(), tmax))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#F2495C" fill-opacity="0.13"/>`, x0, top, x1-x0, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#FF7383" text-anchor="middle">Redis paused</text>`, (x0+x1)/2, top+11)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#F2495C" stroke-opacity="0.5" stroke-dasharray="3,3"/>`, x0, x0, top, top+plotH)
	}
	// axis
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#4a4e57"/>`, left, left+plotW, yAt(0), yAt(0))
	if len(data) == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="13" fill="#9fa3ad" text-anchor="middle">No data</text>`, left+plotW/2, top+plotH/2)
	}
	// legend, in the legend's order (biggest first)
	legend := slices.Clone(data)
	if stacked {
		slices.Reverse(legend)
	}
	lx, ly, row := 10.0, top+plotH+30, 0
	for i, s := range legend {
		label := s.legend
		if label == "" {
			label = "value"
		}
		wd := 22 + 6.3*float64(len([]rune(label)))
		if lx+wd > w-8 && lx > 10 {
			row++
			lx, ly = 10, ly+16
		}
		if row >= legendRows || (row == legendRows-1 && lx+wd+70 > w-8 && i < len(legend)-1) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#9fa3ad">+%d more</text>`, lx, ly, len(legend)-i)
			break
		}
		c := colour(s.legend, indexOf(data, s.legend, stacked))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="3" rx="1" fill="%s"/>`, lx, ly-5, c)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#ccccdc">%s</text>`, lx+16, ly, html.EscapeString(label))
		lx += wd
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// indexOf gives a series its palette slot by its rank (biggest first), so
// colours do not depend on the drawing order.
func indexOf(data []series, legend string, reversed bool) int {
	for i, s := range data {
		if s.legend == legend {
			if reversed {
				return len(data) - 1 - i
			}
			return i
		}
	}
	return 0
}

// shade is c darkened towards the panel background, for stacked bands.
func shade(c string) string {
	r, _ := strconv.ParseUint(c[1:3], 16, 8)
	g, _ := strconv.ParseUint(c[3:5], 16, 8)
	bl, _ := strconv.ParseUint(c[5:7], 16, 8)
	mix := func(v uint64, bg float64) int { return int(float64(v)*0.35 + bg*0.65) }
	return fmt.Sprintf("#%02x%02x%02x", mix(r, 24), mix(g, 27), mix(bl, 31))
}

// niceScale returns a tick step and an axis top (a multiple of the step) for
// values up to ymax: 1, 2 or 5 times a power of ten, about four ticks.
func niceScale(ymax float64) (step, top float64) {
	if ymax <= 0 || math.IsNaN(ymax) {
		return 1, 1
	}
	raw := ymax / 4
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * pow; step >= raw {
			break
		}
	}
	return step, math.Ceil(ymax/step) * step
}

// formatValue formats an axis value in the panel's unit.
func formatValue(v float64, unit string, step float64) string {
	if unit == "s" {
		ms := v * 1000
		stepMS := step * 1000
		switch {
		case v == 0:
			return "0"
		case stepMS >= 1:
			return strconv.FormatFloat(ms, 'f', decimals(stepMS), 64) + " ms"
		default:
			return strconv.FormatFloat(ms*1000, 'f', decimals(stepMS*1000), 64) + " µs"
		}
	}
	s := ""
	switch {
	case v >= 1000:
		s = strconv.FormatFloat(v/1000, 'f', decimals(step/1000), 64) + "K"
	default:
		s = strconv.FormatFloat(v, 'f', decimals(step), 64)
	}
	switch unit {
	case "reqps":
		return s + " req/s"
	case "ops":
		return s + " /s"
	}
	return s
}

func decimals(step float64) int {
	d := 0
	for step < 1 && d < 4 && step > 0 {
		step *= 10
		d++
	}
	if d > 0 && math.Abs(step-math.Round(step)) > 1e-9 {
		d++
	}
	return d
}

func fmtDur(d time.Duration) string { return d.Round(time.Second).String() }
