package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// JSON is the dashboard, as Grafana imports it (Dashboards > New > Import).
//
//go:embed tollgate-dashboard.json
var JSON []byte

// Dashboard is the part of the Grafana dashboard model this package reads.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Schema     int     `json:"schemaVersion"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
}

// Panel is one dashboard panel.
type Panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit   string `json:"unit"`
			Custom struct {
				Stacking struct {
					Mode string `json:"mode"`
				} `json:"stacking"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []Target `json:"targets"`
}

// Stacked reports whether the panel stacks its series.
func (p Panel) Stacked() bool { return p.FieldConfig.Defaults.Custom.Stacking.Mode == "normal" }

// Target is one query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// Variable is a templated variable.
type Variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	Query      struct {
		Query string `json:"query"`
	} `json:"query"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

// Load parses the embedded dashboard.
func Load() (*Dashboard, error) { return ParseDashboard(JSON) }

// ParseDashboard parses a dashboard's JSON.
func ParseDashboard(b []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return &d, nil
}

// AllVars are the values the dashboard's variables take when every class
// and tier is selected ("All", whose allValue is .*), with a rate interval
// fit for scrapes a second apart (Grafana's $__rate_interval is four
// scrape intervals at least).
var AllVars = map[string]string{"class": ".*", "tier": ".*", "__rate_interval": "5s"}

// Expand replaces $name and ${name} in expr by vars[name]. A variable not in
// vars is left as it is, so the PromQL parser rejects it.
func Expand(expr string, vars map[string]string) string {
	for name, v := range vars {
		expr = strings.ReplaceAll(expr, "${"+name+"}", v)
	}
	// longest names first, so $__rate_interval is not read as $__rate
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		expr = strings.ReplaceAll(expr, "$"+name, vars[name])
	}
	return expr
}

// Legend formats a legend template ("{{tenant}} / {{class}}") with a
// series' labels.
func Legend(format string, labels map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(format, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(format[i:], "}}")
		if j < 0 {
			break
		}
		b.WriteString(format[:i])
		b.WriteString(labels[strings.TrimSpace(format[i+2:i+j])])
		format = format[i+j+2:]
	}
	b.WriteString(format)
	return b.String()
}
