package grafana

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// ScrapeInterval is how often the Prometheus of [StartPrometheus] scrapes
// its target: short, so that a few seconds of traffic make rates.
const ScrapeInterval = time.Second

// Prometheus is a private Prometheus server (Debian's prometheus package,
// or any prometheus binary on PATH) scraping one target, with its storage
// in a temporary directory. [Prometheus.Stop] kills it and removes the
// directory.
type Prometheus struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
	// API is Prometheus's HTTP API.
	API promv1.API

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	tr   *http.Transport
}

// ErrNoPrometheus is returned by StartPrometheus when no prometheus binary
// is on PATH.
var ErrNoPrometheus = errors.New("no prometheus binary on PATH (Debian: apt-get install prometheus)")

// StartPrometheus starts a Prometheus that scrapes target (host:port,
// path /metrics) every ScrapeInterval, and waits, at most startTimeout,
// until it is ready and has scraped target once successfully.
func StartPrometheus(ctx context.Context, target string, startTimeout time.Duration) (*Prometheus, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, ErrNoPrometheus
	}
	dir, err := os.MkdirTemp("", "tollgate-prometheus-")
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: tollgate
    metrics_path: /metrics
    static_configs:
      - targets: [%[2]q]
`, ScrapeInterval, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	p := &Prometheus{URL: "http://" + addr, dir: dir, done: make(chan struct{}), tr: &http.Transport{}}
	p.cmd = exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = pdeathsig()
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	client, err := api.NewClient(api.Config{Address: p.URL, Client: &http.Client{Transport: p.tr, Timeout: 5 * time.Second}})
	if err != nil {
		p.Stop()
		return nil, err
	}
	p.API = promv1.NewAPI(client)
	if err := p.waitUp(ctx, startTimeout); err != nil {
		out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		p.Stop()
		return nil, fmt.Errorf("%w\nprometheus log:\n%s", err, out)
	}
	return p, nil
}

// waitUp waits until the server answers and its target is up.
func (p *Prometheus) waitUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		v, _, _, err := p.API.Query(qctx, `up{job="tollgate"} == 1`, time.Time{})
		qcancel()
		if err == nil {
			if vec, ok := v.(model.Vector); ok && len(vec) > 0 {
				return nil
			}
			err = errors.New("target not scraped yet")
		}
		last = err
		select {
		case <-p.done:
			return errors.New("prometheus exited during start-up")
		case <-ctx.Done():
			return fmt.Errorf("prometheus not ready within %v: %w", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop kills the server and removes its storage.
func (p *Prometheus) Stop() {
	p.tr.CloseIdleConnections()
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = os.RemoveAll(p.dir)
}

// Range evaluates expr from start to end every step (a query_range), with
// the dashboard's variables set to AllVars.
func (p *Prometheus) Range(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, _, _, err := p.API.QueryRange(ctx, Expand(expr, AllVars), promv1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, err
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("query_range returned a %s, want a matrix", v.Type())
	}
	return m, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
