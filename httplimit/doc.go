// Package httplimit is tollgate's net/http adapter: it maps a request to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a decision,
// and renders core's answer in net/http's idiom. It computes nothing itself.
package httplimit
