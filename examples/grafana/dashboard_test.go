package grafana

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

func TestDashboardShape(t *testing.T) {
	t.Parallel()
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if d.Schema < 36 { // Grafana 10.0 writes schemaVersion 37+
		t.Errorf("schemaVersion %d: want a Grafana 10+ dashboard", d.Schema)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v, want one Prometheus datasource input DS_PROMETHEUS", d.Inputs)
	}
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	for _, name := range []string{"class", "tier"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" || !v.IncludeAll || v.AllValue != ".*" {
			t.Errorf("variable %q = %+v, want a query variable with All = .*", name, v)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Type != "timeseries" || len(p.Targets) == 0 {
			t.Errorf("panel %d (%q): want a titled timeseries panel with targets", p.ID, p.Title)
		}
		if p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %q, want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
		}
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "class=~") != strings.Contains(tg.Expr, "tier=~") {
				t.Errorf("panel %q: filters by one of $class and $tier but not both: %s", p.Title, tg.Expr)
			}
		}
	}
	// the panels the dashboard promises (docs/observability.md)
	all := string(JSON)
	for _, want := range []string{`outcome=\"allowed\"`, `outcome=\"denied\"`, "topk(", "sum by (tenant",
		"histogram_quantile(0.5,", "histogram_quantile(0.99,", "tollgate_store_duration_seconds_bucket",
		"tollgate_store_errors_total", "failed_open|failed_closed|fallback", `outcome=\"shadow_denied\"`, "tollgate_deny_cache_hits_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("dashboard has no query with %s", want)
		}
	}
}

// needPrometheus starts a Prometheus scraping target, or skips the test
// when none is installed (outside CI; under CI=true that fails).
func needPrometheus(t *testing.T, target string) *Prometheus {
	t.Helper()
	p, err := StartPrometheus(t.Context(), target, 90*time.Second)
	if errors.Is(err, ErrNoPrometheus) && !redistest.InCI() {
		t.Skip("the dashboard is checked on a real Prometheus: apt-get install prometheus (skipped outside CI)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// legendLabels are the labels a legend template names ("{{tenant}}").
var legendLabels = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// checkPanel runs a panel query on Prometheus over [start, end] and
// reports why a panel would be empty or unlabelled: no series, no series
// with a positive value, or a series without a label the legend names.
func checkPanel(ctx context.Context, p *Prometheus, expr, legend string, start, end time.Time) error {
	m, err := p.Range(ctx, expr, start, end, ScrapeInterval)
	if err != nil {
		return err
	}
	if len(m) == 0 {
		return errors.New("no series")
	}
	data := false
	for _, s := range m {
		for _, v := range s.Values {
			data = data || (v.Value > 0 && !math.IsNaN(float64(v.Value)))
		}
		for _, l := range legendLabels.FindAllStringSubmatch(legend, -1) {
			if _, ok := s.Metric[model.LabelName(l[1])]; !ok {
				return fmt.Errorf("series %v has no label %s (legend %q)", s.Metric, l[1], legend)
			}
		}
	}
	if !data {
		return fmt.Errorf("%d series, none above zero", len(m))
	}
	return nil
}

// labelValues is Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

// TestDashboardOnPrometheus drives real traffic, with a store outage,
// through the demo's limiters on a real Redis; a real Prometheus scrapes
// their /metrics over HTTP, and every panel query of the dashboard must
// return series with data and the labels its legend names, and every
// variable query values: the dashboard cannot drift from the names the
// code and the exporter produce.
func TestDashboardOnPrometheus(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.NewServer(t) // private: the test pauses it
	demo, err := NewDemo(redis.Client(t), redistest.Prefix(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer demo.Close()
	srv := httptest.NewServer(demo.Handler)
	defer srv.Close()
	prom := needPrometheus(t, srv.Listener.Addr().String())

	ctx := t.Context()
	const tick = 100 * time.Millisecond
	start := time.Now()
	step := func(from, to int) {
		for n := from; n < to; n++ {
			began := time.Now()
			demo.Traffic(ctx, n, tick)
			time.Sleep(tick - time.Since(began))
		}
	}
	step(0, 40)
	if err := redis.Pause(); err != nil {
		t.Fatal(err)
	}
	step(40, 55)
	if err := redis.Resume(); err != nil {
		t.Fatal(err)
	}
	step(55, 80)
	time.Sleep(3 * ScrapeInterval) // the last traffic scraped
	end := time.Now()

	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if err := checkPanel(ctx, prom, tg.Expr, tg.LegendFormat, start, end); err != nil {
				t.Errorf("panel %q target %s: %s\n%v", p.Title, tg.RefID, tg.Expr, err)
			}
		}
	}
	for _, v := range d.Templating.List {
		m := labelValues.FindStringSubmatch(v.Query.Query)
		if m == nil {
			t.Errorf("variable %q: query %q is not label_values(metric, label)", v.Name, v.Query.Query)
			continue
		}
		vals, _, _, err := prom.API.LabelValues(ctx, m[2], []string{m[1]}, start, end)
		if err != nil || len(vals) == 0 {
			t.Errorf("variable %q: %s has no values: %v", v.Name, v.Query.Query, err)
		}
	}

	// and the check can fail: a misspelt metric, label or value is caught
	for _, broken := range []struct{ expr, legend string }{
		{`sum(rate(tollgate_decision_total[$__rate_interval]))`, ""},
		{`sum by (tenant) (rate(tollgate_decisions_total{outcome="denyed"}[$__rate_interval]))`, "{{tenant}}"},
		{`sum by (tennant) (rate(tollgate_decisions_total[$__rate_interval]))`, "{{tenant}}"},
		{`histogram_quantile(0.99, sum by (le) (rate(tollgate_store_duration_bucket[$__rate_interval])))`, "p99"},
		{`sum by (kind) (rate(tollgate_store_errors_total{kind=~"conection"}[$__rate_interval]))`, "{{kind}}"},
		{`sum by (outcome) (rate(tollgate_decisions_total{outcome="allowed"[$__rate_interval]))`, "{{outcome}}"},
	} {
		if err := checkPanel(ctx, prom, broken.expr, broken.legend, start, end); err == nil {
			t.Errorf("checkPanel(%s) = nil, want an error", broken.expr)
		}
	}
}
