// Package grafana holds tollgate's Grafana dashboard
// (tollgate-dashboard.json, embedded as [JSON]) and what keeps it honest:
//
//   - [Load] parses the dashboard into its panels and PromQL queries;
//   - [Parse] and [Eval] understand the small subset of PromQL the
//     dashboard uses (sum/topk by, rate, histogram_quantile, label
//     matchers), so a test can check every metric and label a panel names
//     against a real /metrics scrape, and examples/cmd/dashshot can render
//     the panels from scraped data without a Prometheus or a Grafana;
//   - [NewDemo] is a process of four limiters (fail-open with the tenant
//     label and the deny cache, fail-closed, local fallback, shadow) behind
//     one OpenTelemetry Prometheus exporter, and [Demo.Traffic] the scripted
//     traffic both of them drive through it.
//
// The evaluator is an approximation of Prometheus, documented on [Eval]; it
// is a check and a renderer, not a query engine.
package grafana
