package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/grafana"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

// TestRunHTML runs the tool end to end, without the screenshot (no
// Chromium in make test): a private Redis, traffic with an outage, a
// private Prometheus, and the rendered page, which must hold every panel
// with a chart.
func TestRunHTML(t *testing.T) {
	for _, bin := range []string{"redis-server", "prometheus"} {
		if _, err := exec.LookPath(bin); err != nil && !redistest.InCI() {
			t.Skipf("dashshot needs %s on PATH (apt-get install %s; skipped outside CI)", bin, bin)
		}
	}
	out := filepath.Join(t.TempDir(), "dashboard.html")
	c := config{html: out, htmlOnly: true, duration: 4 * time.Second, outage: time.Second,
		width: 1600, height: 1000, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	d, err := grafana.Load()
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, p := range d.Panels {
		if !strings.Contains(html, ">"+p.Title+"<") {
			t.Errorf("page has no panel %q", p.Title)
		}
	}
	if n := strings.Count(html, "<svg "); n != len(d.Panels) {
		t.Errorf("%d charts, want %d", n, len(d.Panels))
	}
	// the decisions panel always has data after 4 s of traffic
	if !strings.Contains(html, "<polyline") || !strings.Contains(html, "Redis paused") {
		t.Error("page has no lines or no outage band")
	}
	if !strings.Contains(html, "not a Grafana screenshot") {
		t.Error("page does not say it is not a Grafana screenshot")
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ max, step, top float64 }{
		{0, 1, 1}, {380, 100, 400}, {17.3e-3, 5e-3, 20e-3}, {9, 2.5, 10}, {1, 0.25, 1},
	} {
		step, top := niceScale(tc.max)
		if diff(step, tc.step) || diff(top, tc.top) {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.max, step, top, tc.step, tc.top)
		}
	}
	if got := formatValue(0.005, "s", 0.005); got != "5 ms" {
		t.Errorf("formatValue(5ms) = %q", got)
	}
	if got := formatValue(0.00025, "s", 0.00025); got != "250 µs" {
		t.Errorf("formatValue(250µs) = %q", got)
	}
	if got := formatValue(1500, "reqps", 500); got != "1.5K req/s" {
		t.Errorf("formatValue(1500 req/s) = %q", got)
	}
}

func diff(a, b float64) bool { return a-b > 1e-12 || b-a > 1e-12 }
