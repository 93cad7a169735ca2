// Package fiberlimit is tollgate's Fiber v2 adapter: it maps a request to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a decision,
// and renders core's answer in Fiber v2's idiom. It computes nothing itself.
package fiberlimit
