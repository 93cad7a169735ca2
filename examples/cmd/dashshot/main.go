// Command dashshot renders tollgate's Grafana dashboard
// (examples/grafana/tollgate-dashboard.json) from real data, for the docs'
// screenshot (docs/img/dashboard.png). Grafana is not needed: it is
// tollgate's own rendering of the dashboard's panels, not a Grafana
// screenshot.
//
// It starts a private redis-server on a free port, runs the demo limiters
// of package grafana behind the OpenTelemetry Prometheus exporter on a
// local /metrics, starts a private Prometheus scraping it every second,
// drives scripted traffic (five tenants, one abusive, five classes, a long
// tail) for -duration, pausing the Redis (SIGSTOP) for -outage in the
// middle so that the fail-open, fail-closed and fallback panels have an
// episode to show. Each panel's PromQL is then run by that Prometheus
// (query_range over the run, a second a step), drawn as inline SVG in an
// HTML page, and the page is screenshotted with headless Chromium.
//
//	cd examples && go run ./cmd/dashshot -out ../docs/img/dashboard.png
//
// Needs redis-server and prometheus on PATH (Debian: apt-get install
// redis-server prometheus), and chromium (or -chromium) unless -html-only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/examples/grafana"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

type config struct {
	out      string        // PNG path
	html     string        // HTML path; empty: next to a temporary PNG dir
	htmlOnly bool          // write the HTML, no screenshot
	duration time.Duration // traffic
	outage   time.Duration // Redis paused, in the middle
	chromium string
	width    int
	height   int
	log      *slog.Logger
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "../docs/img/dashboard.png", "PNG to write")
	flag.StringVar(&c.html, "html", "", "also keep the rendered HTML page here")
	flag.BoolVar(&c.htmlOnly, "html-only", false, "write only the HTML page (-html), no screenshot: no Chromium needed")
	flag.DurationVar(&c.duration, "duration", 45*time.Second, "how long to drive traffic")
	flag.DurationVar(&c.outage, "outage", 6*time.Second, "how long Redis is paused, starting at 60% of -duration")
	flag.StringVar(&c.chromium, "chromium", "", "Chromium binary (default: chromium, chromium-browser or google-chrome on PATH)")
	flag.IntVar(&c.width, "width", 1600, "window width")
	flag.IntVar(&c.height, "height", 1000, "window height")
	flag.Parse()
	c.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "dashshot:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if c.htmlOnly && c.html == "" {
		return errors.New("-html-only needs -html")
	}
	chromium := c.chromium
	if !c.htmlOnly {
		var err error
		if chromium, err = findChromium(chromium); err != nil {
			return err
		}
	}
	dash, err := grafana.Load()
	if err != nil {
		return err
	}
	// a private server: the outage pauses it
	srv, err := redistest.StartServer()
	if err != nil {
		return fmt.Errorf("dashshot needs redis-server on PATH (it pauses its own private Redis for the outage): %w", err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer client.Close()
	demo, err := grafana.NewDemo(client, "dashshot", c.log)
	if err != nil {
		return err
	}
	defer demo.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", demo.Handler)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	prom, err := grafana.StartPrometheus(ctx, ln.Addr().String(), 90*time.Second)
	if err != nil {
		return err
	}
	defer prom.Stop()

	c.log.Info("driving traffic", "duration", c.duration, "redis", srv.Addr(), "prometheus", prom.URL)
	start := time.Now().Truncate(time.Second)
	outage, err := drive(ctx, c, demo, srv)
	if err != nil {
		return err
	}
	// the last traffic scraped
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * grafana.ScrapeInterval):
	}
	var times []time.Time
	for t := start; !t.After(start.Add(c.duration)); t = t.Add(time.Second) {
		times = append(times, t)
	}
	q := func(expr string) (model.Matrix, error) {
		return prom.Range(ctx, expr, times[0], times[len(times)-1], time.Second)
	}
	page, err := render(dash, q, times, outage, c.width, c.height)
	if err != nil {
		return err
	}
	htmlPath := c.html
	if htmlPath == "" {
		dir, err := os.MkdirTemp("", "dashshot-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		htmlPath = filepath.Join(dir, "dashboard.html")
	}
	if err := os.WriteFile(htmlPath, page, 0o644); err != nil {
		return err
	}
	if c.htmlOnly {
		c.log.Info("wrote", "html", htmlPath)
		return nil
	}
	if err := screenshot(ctx, chromium, htmlPath, c.out, c.width, c.height); err != nil {
		return err
	}
	c.log.Info("wrote", "png", c.out)
	return nil
}

// window is a span of the run, as offsets from its start.
type window struct{ from, to time.Duration }

// drive sends the demo traffic, a tick every 100 ms (each tick in its own
// goroutine, so a stalled store slows no other tick), and pauses Redis for
// c.outage from 60% of the run.
func drive(ctx context.Context, c config, demo *grafana.Demo, srv *redistest.Server) (window, error) {
	const tick = 100 * time.Millisecond
	outage := window{from: c.duration * 6 / 10}
	outage.to = outage.from + c.outage
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	paused := false
	defer func() {
		if paused {
			_ = srv.Resume()
		}
	}()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return outage, ctx.Err()
		case <-ticker.C:
		}
		el := time.Since(start)
		if el >= c.duration {
			return outage, nil
		}
		if c.outage > 0 && !paused && el >= outage.from && el < outage.to {
			if err := srv.Pause(); err != nil {
				return outage, err
			}
			paused = true
			c.log.Info("redis paused: the limiters fail open, fail closed or fall back")
		}
		if paused && el >= outage.to {
			if err := srv.Resume(); err != nil {
				return outage, err
			}
			paused = false
			c.log.Info("redis resumed")
		}
		// every tick due by now, so a starved process catches up and the
		// rates stay what the script says
		for ; time.Duration(next)*tick <= el; next++ {
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				demo.Traffic(ctx, n, tick)
			}(next)
		}
	}
}

func findChromium(bin string) (string, error) {
	if bin != "" {
		return exec.LookPath(bin)
	}
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(b); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium on PATH (apt-get install chromium, or -chromium, or -html-only)")
}

// screenshot renders page with headless Chromium into png.
func screenshot(ctx context.Context, chromium, page, png string, w, h int) error {
	profile, err := os.MkdirTemp("", "dashshot-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	abs, err := filepath.Abs(png)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}
	pageAbs, err := filepath.Abs(page)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir="+profile, "--screenshot="+abs,
		fmt.Sprintf("--window-size=%d,%d", w, h), "file://"+pageAbs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chromium: %w: %s", err, out)
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("chromium wrote no screenshot: %s", out)
	}
	return nil
}
