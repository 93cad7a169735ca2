// Package svgplot draws the load drivers' pictures, grouped bars and step
// lines, as small self-contained SVG files from a run's own figures, so
// that docs/benchmarks.md shows what the last run measured and nothing is
// drawn by hand.
package svgplot

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// palette is one colour per series, in order (colour-blind safe).
var palette = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"}

// Ref is a horizontal reference line.
type Ref struct {
	Label string
	Y     float64
}

// Bars is a grouped bar chart: Values[g][s] is series s in group g; NaN
// leaves a gap.
type Bars struct {
	Title, YLabel string
	Groups        []string
	Series        []string
	Values        [][]float64
	Refs          []Ref
	Format        string   // of the value printed above each bar, e.g. "%.2f"
	Colors        []string // per series; default: the palette in order
}

// Color is the i-th colour of the palette, for callers that keep one
// colour per name across charts.
func Color(i int) string { return palette[i%len(palette)] }

func pick(colors []string, i int) string {
	if i < len(colors) && colors[i] != "" {
		return colors[i]
	}
	return Color(i)
}

const (
	width, height           = 900, 420
	left, right, top, under = 70, 20, 50, 90
)

func header(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
}

// niceMax rounds m up to 1, 2 or 5 times a power of ten.
func niceMax(m float64) float64 {
	if m <= 0 || math.IsNaN(m) || math.IsInf(m, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(m)))
	for _, f := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if f*p >= m {
			return f * p
		}
	}
	return 10 * p
}

func yAxis(b *strings.Builder, label string, ymax float64, y func(float64) float64) {
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", left, width-right, y(v), y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, trim(v))
	}
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+(height-top-under)/2, html.EscapeString(label))
}

func trim(v float64) string {
	s := fmt.Sprintf("%.3g", v)
	if math.Abs(v) >= 1000 {
		s = fmt.Sprintf("%.0f", v)
	}
	return s
}

// legend writes one entry per name, wrapping onto a second row.
func legend(b *strings.Builder, names, colors []string, dashed map[string]bool) {
	x, y := left, height-34
	for i, n := range names {
		w := 26 + 7*len(n)
		if x+w > width-right && x > left {
			x, y = left, y+18
		}
		c := pick(colors, i)
		if dashed[n] {
			fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="6 3"/>`+"\n", x, x+14, y+5, y+5, c)
		} else {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="10" fill="%s"/>`+"\n", x, y, c)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+18, y+9, html.EscapeString(n))
		x += w
	}
}

// SVG renders the chart.
func (c Bars) SVG() string {
	var b strings.Builder
	header(&b, c.Title)
	m := 0.0
	for _, row := range c.Values {
		for _, v := range row {
			if !math.IsNaN(v) {
				m = max(m, v)
			}
		}
	}
	for _, r := range c.Refs {
		m = max(m, r.Y)
	}
	ymax := niceMax(m * 1.08)
	plotH := float64(height - top - under)
	y := func(v float64) float64 { return float64(top) + plotH*(1-v/ymax) }
	yAxis(&b, c.YLabel, ymax, y)
	gw := float64(width-left-right) / float64(max(1, len(c.Groups)))
	bw := gw * 0.8 / float64(max(1, len(c.Series)))
	format := c.Format
	if format == "" {
		format = "%.2f"
	}
	for g, name := range c.Groups {
		x0 := float64(left) + gw*float64(g) + gw*0.1
		for s := range c.Series {
			if g >= len(c.Values) || s >= len(c.Values[g]) || math.IsNaN(c.Values[g][s]) {
				continue
			}
			v := c.Values[g][s]
			x := x0 + bw*float64(s)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				x, y(v), bw*0.92, y(0)-y(v), pick(c.Colors, s), html.EscapeString(name), html.EscapeString(c.Series[s]), fmt.Sprintf(format, v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>`+"\n", x+bw*0.46, y(v)-3, fmt.Sprintf(format, v))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x0+gw*0.4, height-under+18, html.EscapeString(name))
	}
	for _, r := range c.Refs {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#000000" stroke-dasharray="5 4"/>`+"\n", left, width-right, y(r.Y), y(r.Y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>`+"\n", width-right-2, y(r.Y)-4, html.EscapeString(r.Label))
	}
	legend(&b, c.Series, c.Colors, nil)
	b.WriteString("</svg>\n")
	return b.String()
}

// Series is one line of a Lines chart: points (X[i], Y[i]), drawn as steps
// unless Smooth.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
	Smooth bool   // straight segments between points instead of steps
	Color  string // default: the palette's colour for its index
}

// Lines is a chart of step lines, e.g. cumulative admissions over time.
type Lines struct {
	Title, XLabel, YLabel string
	Series                []Series
	XMin                  float64 // the left end of the x axis; points before it are the caller's to leave out
}

// SVG renders the chart.
func (c Lines) SVG() string {
	var b strings.Builder
	header(&b, c.Title)
	xm, ym := 0.0, 0.0
	for _, s := range c.Series {
		for i := range s.X {
			xm, ym = max(xm, s.X[i]), max(ym, s.Y[i])
		}
	}
	xmin := c.XMin
	xmax, ymax := xmin+niceMax(xm-xmin), niceMax(ym*1.05)
	plotW, plotH := float64(width-left-right), float64(height-top-under)
	x := func(v float64) float64 { return float64(left) + plotW*(v-xmin)/(xmax-xmin) }
	y := func(v float64) float64 { return float64(top) + plotH*(1-v/ymax) }
	yAxis(&b, c.YLabel, ymax, y)
	for i := 0; i <= 5; i++ {
		v := xmin + (xmax-xmin)*float64(i)/5
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(v), height-under+16, trim(v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+int(plotW/2), height-under+34, html.EscapeString(c.XLabel))
	names := make([]string, len(c.Series))
	colors := make([]string, len(c.Series))
	dashed := map[string]bool{}
	for i, s := range c.Series {
		names[i], colors[i] = s.Name, pick([]string{s.Color}, 0)
		if s.Color == "" {
			colors[i] = Color(i)
		}
		dashed[s.Name] = s.Dashed
		if len(s.X) == 0 {
			continue
		}
		var p strings.Builder
		fmt.Fprintf(&p, "M%.1f %.1f", x(s.X[0]), y(s.Y[0]))
		for j := 1; j < len(s.X); j++ {
			if !s.Smooth {
				fmt.Fprintf(&p, " H%.1f", x(s.X[j]))
			}
			fmt.Fprintf(&p, " L%.1f %.1f", x(s.X[j]), y(s.Y[j]))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 3"`
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"%s><title>%s</title></path>`+"\n", p.String(), colors[i], dash, html.EscapeString(s.Name))
	}
	legend(&b, names, colors, dashed)
	b.WriteString("</svg>\n")
	return b.String()
}

// Write writes svg to path.
func Write(path, svg string) error {
	return os.WriteFile(path, []byte(svg), 0o644)
}
