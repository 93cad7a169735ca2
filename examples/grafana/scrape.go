package grafana

import (
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series' value: a metric name (histograms flattened into
// _bucket, _sum and _count as Prometheus stores them) and its labels.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one read of a /metrics endpoint.
type Scrape struct {
	At      time.Time
	Samples []Sample
}

// ParseScrape reads the Prometheus text format.
func ParseScrape(r io.Reader, at time.Time) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Scrape{}, fmt.Errorf("parse /metrics: %w", err)
	}
	s := Scrape{At: at}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(name string, v float64, extra ...string) {
				ls := labels
				if len(extra) > 0 {
					ls = maps.Clone(labels)
					ls[extra[0]] = extra[1]
				}
				s.Samples = append(s.Samples, Sample{Name: name, Labels: ls, Value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					ub := b.GetUpperBound()
					inf = inf || math.IsInf(ub, 1)
					add(name+"_bucket", float64(b.GetCumulativeCount()), "le", formatLE(ub))
				}
				if !inf {
					add(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				}
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return s, nil
}

func formatLE(ub float64) string {
	if math.IsInf(ub, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(ub, 'g', -1, 64)
}

// Names returns every metric name in s with the label names its series
// carry.
func (s Scrape) Names() map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	for _, x := range s.Samples {
		ls := out[x.Name]
		if ls == nil {
			ls = map[string]map[string]bool{}
			out[x.Name] = ls
		}
		for k, v := range x.Labels {
			if ls[k] == nil {
				ls[k] = map[string]bool{}
			}
			ls[k][v] = true
		}
	}
	return out
}
