package svgplot

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// elements parses svg as XML and counts its elements by name.
func elements(t *testing.T, svg string) map[string]int {
	t.Helper()
	n := map[string]int{}
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if s, ok := tok.(xml.StartElement); ok {
			n[s.Name.Local]++
		}
	}
}

func TestBarsOneRectPerValueAndAGapForNaN(t *testing.T) {
	b := Bars{Title: "a <b> & c", YLabel: "x", Groups: []string{"g1", "g2"}, Series: []string{"s1", "s2"},
		Values: [][]float64{{1, 2}, {math.NaN(), 0.5}}, Refs: []Ref{{Label: "one", Y: 1}}}
	n := elements(t, b.SVG())
	// background + 3 bars + 2 legend swatches
	if n["rect"] != 1+3+2 {
		t.Fatalf("%d rects, want 6", n["rect"])
	}
	if n["line"] < 1 {
		t.Fatal("no reference line")
	}
}

func TestLinesOnePathPerSeries(t *testing.T) {
	l := Lines{Title: "t", XLabel: "s", YLabel: "n", XMin: 4, Series: []Series{
		{Name: "a", X: []float64{4, 4.5, 5}, Y: []float64{1, 2, 3}},
		{Name: "bound", X: []float64{4, 5}, Y: []float64{10, 12}, Dashed: true, Smooth: true, Color: "#000000"},
		{Name: "empty"},
	}}
	svg := l.SVG()
	if n := elements(t, svg)["path"]; n != 2 {
		t.Fatalf("%d paths, want 2 (the empty series draws none)", n)
	}
	if !strings.Contains(svg, `stroke="#000000"`) {
		t.Fatal("the series' own colour is not used")
	}
}

func TestNiceMax(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.9, 1}, {1.1, 1.2}, {5.5, 6}, {210, 250}, {math.NaN(), 1}} {
		if got := niceMax(c.in); got != c.want {
			t.Errorf("niceMax(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
