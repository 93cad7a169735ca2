// Package grpclimit is tollgate's gRPC adapter: it maps a call to a tenant,
// class and cost, asks [github.com/tollgate-go/tollgate/core] for a
// decision, and renders core's answer in gRPC's idiom. It computes no
// number itself: every value below comes from the core Decision.
//
// # Server
//
// [UnaryServerInterceptor] and [StreamServerInterceptor] take a gate.Gate,
// built and validated once with gate.New, and go after the
// authentication interceptor, which stores the verified tenant with
// gate.ContextWithTenant. Metadata the client sets is never a tenant
// source.
//
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"/reports.v1.Reports/Export": {Class: "export", Cost: 10},
//	}))
//	if err != nil { ... } // a bad method table, named
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(auth.Unary, grpclimit.UnaryServerInterceptor(gate, opts...)),
//		grpc.ChainStreamInterceptor(auth.Stream, grpclimit.StreamServerInterceptor(gate, opts...)),
//	)
//
// Each call is charged the (class, cost) of its full method (the gate's
// route table, keyed "/pkg.Service/Method" or "/pkg.Service/*", and cost
// function; default class "default", cost 1) before
// the handler runs; a stream is charged when it opens, and with
// [WithMessageCost] each message a client or bidi stream receives is
// charged too. A call the server's grpc.UnknownServiceHandler answers (a
// proxy of unknown services) goes through the stream interceptor and is
// charged by its full method as well; without one, grpc-go answers
// Unimplemented before any interceptor runs, and nothing is charged. The
// answers:
//
//   - Allowed (or shadow-denied, core.WithShadow): the handler runs; the
//     header metadata carries ratelimit and ratelimit-policy (IETF draft-11
//     values) and x-ratelimit-limit/-remaining/-reset, as selected by
//     gate.WithHeaderStyle.
//   - Denied: codes.ResourceExhausted ([WithDeniedCode]: Unavailable), the
//     handler not called, with status details: one errdetails.ErrorInfo
//     (Reason "RATE_LIMIT_EXCEEDED", Domain "tollgate.dev" ([WithDomain]),
//     Metadata policy, limit, remaining, cost and reason), one
//     errdetails.RetryInfo with the exact delay (not rounded), and one
//     errdetails.QuotaFailure whose violation's Subject is
//     quota.Tenant.Subject ("tenant:<escaped id>"). The trailers carry the
//     rate-limit values, retry-after (whole seconds, at least 1) and
//     grpc-retry-pushback-ms (the delay in milliseconds, rounded up).
//     Nothing is sent before the status, so the response is Trailers-Only:
//     grpc-go honours pushback only then.
//   - Denied because the cost exceeds the capacity (it can never be met):
//     the same code, ErrorInfo and QuotaFailure, ErrorInfo reason
//     "cost_exceeds_capacity", grpc-retry-pushback-ms -1 (gRFC A6: do not
//     retry), and deliberately no RetryInfo and no retry-after: there is no
//     delay after which it would succeed, and a zero RetryInfo would invite
//     an immediate retry.
//   - Denied for lack of a concurrency slot (a class with a concurrency
//     limit, every slot of the tenant taken): the same code and details,
//     ErrorInfo reason "concurrency_limit", RetryInfo and pushback the
//     limiter's hint. An admitted unary call holds its slot until the
//     handler returns; a stream holds it (renewed) until the stream ends;
//     with [WithMessageCost] a message of such a class frees its slot as
//     soon as it is received.
//   - Store failure: fail-open (the limiter's default) runs the handler
//     with no rate-limit metadata; fail-closed answers codes.Unavailable
//     with no details, never ResourceExhausted.
//   - No tenant in the context: codes.Unauthenticated, unless
//     gate.WithAnonymous keys such callers by their peer IP.
//   - An invalid request (a tenant ID core cannot key): InvalidArgument.
//   - A cost function's bad route: codes.Internal with the fixed message
//     "The rate limiter is misconfigured."; the cause goes to
//     [WithErrorHandler] only. (A nil gate or a bad option panics where
//     the interceptor is registered.)
//
// A message denied by [WithMessageCost] is dropped and the stream's
// RecvMsg returns the denial's status error; the header metadata has
// usually been sent by then, so that answer is not Trailers-Only.
//
// # Clients
//
// [UnaryClientInterceptor] and [StreamClientInterceptor] retry throttled
// calls after the RetryInfo / pushback delay plus upward jitter, capped,
// and never retry a "never" answer (grpc-retry-pushback-ms -1, a malformed
// or repeated pushback, or an ErrorInfo whose reason metadata is
// "cost_exceeds_capacity"); a stream keeps at most 1 MiB of sent messages
// to replay; the policy is shared with the HTTP
// RoundTripper in package github.com/tollgate-go/tollgate/core/retry. A
// grpc-go service-config retryPolicy with RESOURCE_EXHAUSTED in
// retryableStatusCodes works too (it honours grpc-retry-pushback-ms but
// adds no jitter); use one or the other.
package grpclimit
