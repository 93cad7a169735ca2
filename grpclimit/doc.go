// Package grpclimit is tollgate's gRPC adapter: it maps a request to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a decision,
// and renders core's answer in gRPC's idiom. It computes nothing itself.
package grpclimit
