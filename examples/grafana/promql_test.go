package grafana

import (
	"math"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr string
		ok         bool
	}{
		{"sum by rate", `sum by (outcome) (rate(m_total{a="x", b=~"y|z"}[5s]))`, true},
		{"by after", `sum(rate(m_total[1m])) by (a)`, true},
		{"topk", `topk(5, sum by (tenant) (rate(m_total[5s])))`, true},
		{"quantile", `histogram_quantile(0.99, sum by (le) (rate(h_bucket{result="ok"}[5s])))`, true},
		{"label_values", `label_values(m_total, class)`, true},
		{"unknown function", `irate(m_total[5s])`, false},
		{"rate without range", `rate(m_total)`, false},
		{"unexpanded variable", `rate(m_total{class=~"$class"}[5s])`, false},
		{"bad regexp", `m_total{a=~"("}`, false},
		{"binary operator", `m_total / m_total`, false},
		{"unterminated", `sum(rate(m_total[5s])`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.expr)
			if (err == nil) != tc.ok {
				t.Errorf("Parse(%s) error = %v, want ok=%v", tc.expr, err, tc.ok)
			}
		})
	}
}

func TestEval(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	c := func(v float64, ls ...string) Sample {
		l := map[string]string{}
		for i := 0; i < len(ls); i += 2 {
			l[ls[i]] = ls[i+1]
		}
		return Sample{Name: "m_total", Labels: l, Value: v}
	}
	h := func(le string, v float64) Sample {
		return Sample{Name: "h_bucket", Labels: map[string]string{"le": le}, Value: v}
	}
	scrapes := []Scrape{
		{At: t0, Samples: []Sample{c(10, "t", "a"), c(0, "t", "b"), h("0.1", 0), h("1", 0), h("+Inf", 0)}},
		{At: t0.Add(time.Second), Samples: []Sample{c(20, "t", "a"), c(5, "t", "b"), c(4, "t", "c"), h("0.1", 50), h("1", 100), h("+Inf", 100)}},
		{At: t0.Add(2 * time.Second), Samples: []Sample{c(30, "t", "a"), c(15, "t", "b"), c(8, "t", "c"), h("0.1", 50), h("1", 100), h("+Inf", 100)}},
	}
	eval := func(expr string, i int) []Sample {
		t.Helper()
		n, err := Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Eval(n, scrapes, i)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	byT := func(v []Sample) map[string]float64 {
		m := map[string]float64{}
		for _, s := range v {
			m[s.Labels["t"]] = s.Value
		}
		return m
	}
	// a: 20 in 2 s; b: 15 in 2 s; c born in the window: 8 from 0
	got := byT(eval(`sum by (t) (rate(m_total[10s]))`, 2))
	if got["a"] != 10 || got["b"] != 7.5 || got["c"] != 4 {
		t.Errorf("rate by t = %v, want a=10 b=7.5 c=4", got)
	}
	if got := eval(`sum(rate(m_total[10s]))`, 2); len(got) != 1 || got[0].Value != 21.5 {
		t.Errorf("sum = %v, want 21.5", got)
	}
	if got := byT(eval(`topk(1, sum by (t) (rate(m_total[10s])))`, 2)); len(got) != 1 || got["a"] != 10 {
		t.Errorf("topk(1) = %v, want a only", got)
	}
	// window of 1.5 s at the last scrape: only the last two scrapes
	if got := byT(eval(`sum by (t) (rate(m_total[1500ms]))`, 2)); got["b"] != 10 {
		t.Errorf("rate over 1.5s = %v, want b=10", got)
	}
	// 100 observations, 50 below 0.1 and 50 in (0.1, 1]: p50 is 0.1, p75
	// halfway through the second bucket
	q := func(expr string, i int) float64 {
		v := eval(expr, i)
		if len(v) != 1 {
			t.Fatalf("%s: %v", expr, v)
		}
		return v[0].Value
	}
	if got := q(`histogram_quantile(0.5, sum by (le) (rate(h_bucket[10s])))`, 1); math.Abs(got-0.1) > 1e-9 {
		t.Errorf("p50 = %v, want 0.1", got)
	}
	if got := q(`histogram_quantile(0.75, sum by (le) (rate(h_bucket[10s])))`, 1); math.Abs(got-0.55) > 1e-9 {
		t.Errorf("p75 = %v, want 0.55", got)
	}
	// no observations in the last second: NaN, as Prometheus
	if got := q(`histogram_quantile(0.5, sum by (le) (rate(h_bucket[1500ms])))`, 2); !math.IsNaN(got) {
		t.Errorf("p50 of nothing = %v, want NaN", got)
	}
}

func TestExpandAndLegend(t *testing.T) {
	t.Parallel()
	if got := Expand(`rate(m{class=~"$class"}[$__rate_interval])`, AllVars); got != `rate(m{class=~".*"}[5s])` {
		t.Errorf("Expand = %s", got)
	}
	if got := Legend("{{tenant}} / {{ class }}", map[string]string{"tenant": "acme", "class": "export"}); got != "acme / export" {
		t.Errorf("Legend = %q", got)
	}
}
