// Package echolimit is tollgate's Echo v4 adapter: it maps a request to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a decision,
// and renders core's answer in Echo v4's idiom. It computes nothing itself.
package echolimit
