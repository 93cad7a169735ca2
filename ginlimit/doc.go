// Package ginlimit is tollgate's Gin adapter: it maps a request to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a decision,
// and renders core's answer in Gin's idiom. It computes nothing itself.
package ginlimit
