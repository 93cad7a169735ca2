// Package connectlimit is tollgate's Connect (connect-go) adapter: it maps
// a call to a tenant, class and cost, asks
// [github.com/tollgate-go/tollgate/core] for a decision, and renders core's
// answer as a Connect error. It computes no number itself: every value
// below comes from the core Decision.
//
// Connect handlers are net/http handlers, so httplimit could run in front
// of them, but its answer, HTTP 429 with a problem body, is no RPC status:
// gRPC and Connect clients read an HTTP 429 without grpc-status as
// UNAVAILABLE, and the RetryInfo that tollgate's clients honour is lost.
// This package answers in the RPC's own terms instead, the same way over
// the Connect, gRPC and gRPC-Web protocols, which connect-go serves alike.
//
// It is built on connectrpc.com/connect v1. connect-go v2
// (connectrpc.com/connect/v2, first released in October 2026) changed the
// Go API (interceptors became function types over a transport-agnostic
// stream, handlers take plain messages), not the wire. v1 stays
// supported, the Connect services running today and their generated code
// are on it, and so is part of the ecosystem (vanguard, for one), so v1 is
// what most users have to limit. A v1 interceptor does not fit a v2
// server, nor the other way round: a v2 adapter will be a module of its
// own, as echov5limit is beside echolimit.
//
// # Server
//
// [NewInterceptor] takes a gate.Gate, built and validated once with
// gate.New, and goes after the authentication interceptor, which stores
// the verified tenant with gate.ContextWithTenant. Headers the client sets
// are never a tenant source.
//
//	gate, err := gate.New(lim, gate.WithRoutes(gate.Routes{
//		"/reports.v1.Reports/Export": {Class: "export", Cost: 10},
//	}))
//	if err != nil { ... } // a bad procedure table, named
//	path, h := reportsv1connect.NewReportsHandler(svc,
//		connect.WithInterceptors(auth, connectlimit.NewInterceptor(gate, opts...)))
//
// Each call is charged the (class, cost) of its procedure (the gate's
// route table, keyed "/pkg.Service/Method" or "/pkg.Service/*", and cost
// function; default class "default", cost 1) before the handler runs; a
// stream is charged when it opens, and with [WithMessageCost] each message
// a client or bidi stream receives is charged too. A procedure no handler
// serves is answered by the HTTP mux (404, CodeUnimplemented to the
// client) before any interceptor runs, and nothing is charged. The
// answers:
//
//   - Allowed (or shadow-denied, core.WithShadow): the handler runs; the
//     response headers carry RateLimit and RateLimit-Policy (IETF draft-11
//     values) and X-RateLimit-Limit/-Remaining/-Reset, as selected by
//     gate.WithHeaderStyle, whether the handler answers or fails.
//   - Denied: connect.CodeResourceExhausted ([WithDeniedCode]:
//     CodeUnavailable), the handler not called, with error details: one
//     errdetails.ErrorInfo (Reason "RATE_LIMIT_EXCEEDED", Domain
//     "tollgate.dev" ([WithDomain]), Metadata policy, limit, remaining,
//     cost and reason), one errdetails.RetryInfo with the exact delay (not
//     rounded), and one errdetails.QuotaFailure whose violation's Subject
//     is quota.Tenant.Subject ("tenant:<escaped id>"). The error's
//     metadata carries the rate-limit values, Retry-After (whole seconds,
//     at least 1) and Grpc-Retry-Pushback-Ms (the delay in milliseconds,
//     rounded up).
//   - Denied because the cost exceeds the capacity (it can never be met):
//     the same code, ErrorInfo and QuotaFailure, ErrorInfo reason
//     "cost_exceeds_capacity", Grpc-Retry-Pushback-Ms -1 (gRFC A6: do not
//     retry), and no RetryInfo and no Retry-After.
//   - Denied for lack of a concurrency slot: the same code and details,
//     ErrorInfo reason "concurrency_limit", RetryInfo and pushback the
//     limiter's hint. An admitted unary call holds its slot until the
//     handler returns, a stream until it ends; with [WithMessageCost] a
//     message of such a class frees its slot as soon as it is received.
//   - Store failure: fail-open (the limiter's default) runs the handler
//     with no rate-limit headers; fail-closed answers CodeUnavailable with
//     no details, never CodeResourceExhausted. A check shed because the
//     process could not make it in time: CodeUnavailable with a RetryInfo
//     and the pushback.
//   - No tenant in the context: CodeUnauthenticated, unless
//     gate.WithAnonymous keys such callers by their peer IP.
//   - An invalid request (a tenant ID core cannot key): CodeInvalidArgument.
//   - A cost function's bad route: CodeInternal with the fixed message
//     "The rate limiter is misconfigured."; the cause goes to
//     [WithErrorHandler] only.
//
// A handler may report its actual cost with gate.ReportCost on the
// context it is given (gate.WithCostReports): the reservation is settled
// when the handler returns, or when the stream ends.
//
// # On the wire
//
// The code, message and details are the same on every protocol; where the
// metadata goes differs. Over gRPC and gRPC-Web it is trailing metadata,
// as grpclimit sends it, except that connect-go never sends a gRPC
// Trailers-Only response (net/http cannot): a grpc-go client receives a
// header frame (content-type, date, grpc-accept-encoding) before the
// status. A grpc-go service-config retryPolicy stops once headers arrive
// and does not retry the denial, nor does grpclimit's stream client
// interceptor; grpclimit's unary client interceptor counts a header of
// transport fields only as no answer and retries it. A gRPC-Web denial is
// trailers-only: its trailers are the HTTP response headers. Over the
// Connect protocol a unary error is an HTTP response: CodeResourceExhausted is HTTP 429, CodeUnavailable 503,
// the metadata are plain HTTP headers (Retry-After among them) and the
// details are in the JSON body; a streaming error carries them in the end
// of stream message. So a plain HTTP client behind core/retry's Transport
// honours a Connect-protocol denial's Retry-After too.
//
// # Clients
//
// [NewClientInterceptor] retries calls the server throttled after the
// RetryInfo / pushback delay plus upward jitter, capped, and never retries
// a "never" answer (Grpc-Retry-Pushback-Ms -1, a malformed or repeated
// pushback, or an ErrorInfo whose reason metadata is
// "cost_exceeds_capacity"); the policy is core/retry's, shared with
// grpclimit's client interceptors and the HTTP RoundTripper. A stream is
// retried while no response message has arrived, its sent messages (up to
// 1 MiB) sent again.
package connectlimit
