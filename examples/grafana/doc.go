// Package grafana holds tollgate's Grafana dashboard
// (tollgate-dashboard.json, embedded as [JSON]) and what keeps it honest:
//
//   - [Load] parses the dashboard into its panels and PromQL queries;
//   - [StartPrometheus] runs a real, private Prometheus (Debian's
//     prometheus package) that scrapes a /metrics endpoint every second,
//     so a test can run every panel's query through Prometheus's HTTP API,
//     and examples/cmd/dashshot can draw the panels from what it answers;
//   - [NewDemo] is a process of four limiters (fail-open with the tenant
//     label and the deny cache, fail-closed, local fallback, shadow) behind
//     one OpenTelemetry Prometheus exporter, and [Demo.Traffic] the scripted
//     traffic both of them drive through it.
package grafana
