package examples_test

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"go.yaml.in/yaml/v3"
)

// docker-compose.yml cannot be run here (no Docker engine): check that it
// parses and says what the examples need.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build struct {
				Context    string            `yaml:"context"`
				Dockerfile string            `yaml:"dockerfile"`
				Args       map[string]string `yaml:"args"`
			} `yaml:"build"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, s := range []string{"redis", "postgres"} {
		if f.Services[s].Image == "" {
			t.Errorf("service %s: no image", s)
		}
	}
	ports := map[string]bool{}
	for _, name := range []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3", "grpc", "connect"} {
		s, ok := f.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		if s.Build.Args["EXAMPLE"] != name {
			t.Errorf("%s: builds EXAMPLE=%q", name, s.Build.Args["EXAMPLE"])
		}
		if _, err := os.Stat(filepath.Join(name, "main.go")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil || s.Build.Context != ".." {
			t.Errorf("%s: build context %q, Dockerfile %q: %v", name, s.Build.Context, s.Build.Dockerfile, err)
		}
		env := s.Environment
		if env["REDIS_URL"] != "redis://redis:6379/0" || !strings.HasPrefix(env["DATABASE_URL"], "postgres://") ||
			env["TOLLGATE_CONFIG"] == "" || !strings.HasPrefix(env["ADDR"], "0.0.0.0:") {
			t.Errorf("%s: environment %v", name, env)
		}
		if want := "${TOLLGATE_JWT_SECRET:-" + app.DevSecret + "}"; env["TOLLGATE_JWT_SECRET"] != want {
			t.Errorf("%s: TOLLGATE_JWT_SECRET %q, want %q so that minted tokens work", name, env["TOLLGATE_JWT_SECRET"], want)
		}
		if len(s.DependsOn) != 2 {
			t.Errorf("%s: depends_on %v", name, s.DependsOn)
		}
		if env["TOLLGATE_DEMO"] != "${TOLLGATE_DEMO:-}" {
			t.Errorf("%s: TOLLGATE_DEMO %q, want it passed through (never set for the user)", name, env["TOLLGATE_DEMO"])
		}
		for _, p := range s.Ports {
			// published on the loopback interface only: the services run
			// with a public development secret
			ip, rest, _ := strings.Cut(p, ":")
			host, _, _ := strings.Cut(rest, ":")
			if ip != "127.0.0.1" {
				t.Errorf("%s: port %q is published on every interface, want 127.0.0.1:<port>:<port>", name, p)
			}
			if ports[host] {
				t.Errorf("%s: host port %s used twice", name, host)
			}
			ports[host] = true
		}
	}
}

// tollgate.yaml is what every example serves by default: it must price the
// service's routes and gRPC methods as the examples' docs say, and exempt
// /healthz and /metrics.
func TestDefaultConfigPricesTheService(t *testing.T) {
	cfg, err := config.Load("tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if embedded, err := config.Parse("embedded", examples.DefaultConfig); err != nil || !reflect.DeepEqual(embedded.Routes, cfg.Routes) {
		t.Fatalf("examples.DefaultConfig is not tollgate.yaml: %v", err)
	}
	for _, c := range []struct {
		method, pattern string
		want            gate.Route
	}{
		{http.MethodGet, app.PathProfile, gate.Route{Class: quota.DefaultClass, Cost: 1}},
		{http.MethodPost, app.PathExport, gate.Route{Class: app.ClassExport, Cost: 5}},
		{http.MethodPost, app.PathComplete, gate.Route{Class: app.ClassLLM, Cost: 100}},
		{http.MethodGet, app.PathHealth, gate.Route{Exempt: true}},
		{http.MethodGet, app.PathMetrics, gate.Route{Exempt: true}},
		{"", demopb.Demo_GetProfile_FullMethodName, gate.Route{Class: quota.DefaultClass, Cost: 1}},
		{"", demopb.Demo_ExportReport_FullMethodName, gate.Route{Class: app.ClassExport, Cost: 5}},
	} {
		table := cfg.Routes
		if c.method == "" {
			table = cfg.GRPCMethods
		}
		if got, ok := table.Lookup(c.method, c.pattern); !ok || got != c.want {
			t.Errorf("%s %s: %+v, %v; want %+v", c.method, c.pattern, got, ok, c.want)
		}
	}
	for _, tier := range []string{"free", "pro"} {
		if _, ok := cfg.Tiers.Tiers[tier]; !ok {
			t.Errorf("no tier %q (the docs and cmd/mint name it)", tier)
		}
	}
	// POST /v1/complete reserves 100 of these and settles to what the
	// handler reports: README.md shows the free tier's numbers.
	free, pro := cfg.Tiers.Tiers["free"].Classes[app.ClassLLM], cfg.Tiers.Tiers["pro"].Classes[app.ClassLLM]
	if free != (quota.Quota{Capacity: 1000, RefillPerSecond: 10}) {
		t.Errorf("free llm = %+v, want capacity 1000, refill 10/s", free)
	}
	if pro.Capacity <= free.Capacity || pro.RefillPerSecond <= free.RefillPerSecond {
		t.Errorf("pro llm = %+v, want more than free's %+v", pro, free)
	}
}

// The metric samples README.md shows carry only the labels
// docs/observability.md lists for tollgate.decisions.
func TestReadmeMetricLabels(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(obs), "\n") {
		if strings.HasPrefix(line, "| `tollgate.decisions` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("docs/observability.md has no tollgate.decisions row")
	}
	samples := 0
	for _, line := range strings.Split(string(readme), "\n") {
		rest, ok := strings.CutPrefix(line, "tollgate_decisions_total{")
		if !ok {
			continue
		}
		samples++
		labels, _, _ := strings.Cut(rest, "}")
		for _, pair := range strings.Split(labels, ",") {
			name, _, ok := strings.Cut(pair, "=")
			if !ok { // "...": the exporter's own labels
				continue
			}
			if !strings.Contains(row, "`"+name+"`") {
				t.Errorf("README.md shows label %q on tollgate_decisions_total; docs/observability.md lists: %s", name, row)
			}
		}
	}
	if samples == 0 {
		t.Error("README.md shows no tollgate_decisions_total sample")
	}
}

// README.md lists each service's default listen address as the code has it.
func TestReadmeListsDefaultAddrs(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range app.DefaultAddrs {
		if row := "| `" + name + "` | `" + addr + "`"; !strings.Contains(string(readme), row) {
			t.Errorf("README.md has no row %q", row)
		}
	}
}

// tollgate.yaml limits GET /v1/reports to 2 in flight for tier free, and
// docker-compose gives tollgate-rls that file too: one tier file for the
// services and the gateway.
func TestReportsConcurrency(t *testing.T) {
	cfg, err := config.Load("tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Tiers.Tiers["free"].Classes["reports"]; q != (quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 2}) {
		t.Errorf("free reports = %+v", q)
	}
	compose, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), `volumes: ["./tollgate.yaml:/etc/tollgate/tollgate.yaml:ro"]`) {
		t.Error("docker-compose.yml: the rls service does not mount tollgate.yaml")
	}
	if _, err := os.Stat("tollgate-rls.yaml"); !os.IsNotExist(err) {
		t.Errorf("tollgate-rls.yaml is back (%v): the gateway reads tollgate.yaml", err)
	}
}
