// Command dashshot renders tollgate's Grafana dashboard
// (examples/grafana/tollgate-dashboard.json) from real data, for the docs'
// screenshot (docs/img/dashboard.png). Grafana is not needed: it is
// tollgate's own rendering of the dashboard's panels, not a Grafana
// screenshot.
//
// It starts a private redis-server on a free port, runs the demo limiters
// of package grafana behind the OpenTelemetry Prometheus exporter on a
// local /metrics, drives scripted traffic (five tenants, one abusive, five
// classes, a long tail) for -duration, pausing the Redis (SIGSTOP) for
// -outage in the middle so that the fail-open, fail-closed and fallback
// panels have an episode to show, and scrapes /metrics every second. Each
// panel's PromQL is then evaluated over the scrapes by grafana.Eval (an
// approximation of Prometheus, documented there), drawn as inline SVG in
// an HTML page, and the page is screenshotted with headless Chromium.
//
//	cd examples && go run ./cmd/dashshot -out ../docs/img/dashboard.png
//
// Needs redis-server on PATH, and chromium (or -chromium) unless -html-only.
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
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/examples/grafana"
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
	srv, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	client := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1})
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
	metricsURL := "http://" + ln.Addr().String() + "/metrics"

	c.log.Info("driving traffic", "duration", c.duration, "redis", srv.addr, "metrics", metricsURL)
	scrapes, outage, err := drive(ctx, c, demo, srv, metricsURL)
	if err != nil {
		return err
	}
	page, err := render(dash, scrapes, outage, c.width, c.height)
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
// goroutine, so a stalled store slows no other tick), pauses Redis for
// c.outage from 60% of the run, and scrapes metricsURL every second.
func drive(ctx context.Context, c config, demo *grafana.Demo, srv *redisServer, metricsURL string) ([]grafana.Scrape, window, error) {
	const tick = 100 * time.Millisecond
	outage := window{from: c.duration * 6 / 10}
	outage.to = outage.from + c.outage
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var scrapes []grafana.Scrape
	hc := &http.Client{Timeout: 5 * time.Second}
	paused := false
	defer func() {
		if paused {
			_ = srv.signal(syscall.SIGCONT)
		}
	}()
	next, scraped := 0, time.Duration(-1)
	for {
		select {
		case <-ctx.Done():
			return nil, outage, ctx.Err()
		case <-ticker.C:
		}
		el := time.Since(start)
		if el >= c.duration {
			break
		}
		if c.outage > 0 && !paused && el >= outage.from && el < outage.to {
			if err := srv.signal(syscall.SIGSTOP); err != nil {
				return nil, outage, err
			}
			paused = true
			c.log.Info("redis paused: the limiters fail open, fail closed or fall back")
		}
		if paused && el >= outage.to {
			if err := srv.signal(syscall.SIGCONT); err != nil {
				return nil, outage, err
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
		if el.Truncate(time.Second) > scraped {
			scraped = el.Truncate(time.Second)
			s, err := scrape(ctx, hc, metricsURL)
			if err != nil {
				return nil, outage, err
			}
			scrapes = append(scrapes, s)
		}
	}
	return scrapes, outage, nil
}

func scrape(ctx context.Context, hc *http.Client, url string) (grafana.Scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return grafana.Scrape{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return grafana.Scrape{}, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return grafana.Scrape{}, fmt.Errorf("scrape: %s", resp.Status)
	}
	return grafana.ParseScrape(resp.Body, time.Now())
}

// redisServer is a private redis-server the tool may pause.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("dashshot needs redis-server on PATH (it pauses its own private Redis for the outage): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "dashshot-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			s.stop()
			return nil, fmt.Errorf("redis-server exited during start-up (log in %s)", dir)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("redis-server not ready: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
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
