// Package conformance is tollgate's adapter conformance suite: one set of
// scenarios, with expected answers kept as golden transcripts, that every
// adapter (net/http, Gin, Echo v4 and v5, Fiber v2 and v3, gRPC, or your
// own) must answer identically. It holds adapters to
// https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md (the
// wire rules: statuses, rate-limit headers, Retry-After, problem+json
// bodies, keys in Redis, failure policies) against a real Redis, standalone
// and Cluster.
//
// # Running it for an adapter
//
// Implement [Target]: a factory that, given a [Setup] (a *core.Limiter the
// suite built, a route table by endpoint name, a header style, ...), builds
// one instance of a small service protected by your adapter, and returns an
// [Instance] that sends a [Request] and returns a normalised [Response].
// The service has three parts, in this order:
//
//   - a test authentication layer: it reads the Authorization header
//     (gRPC: metadata) the suite sends, decodes it with [Authenticate] and
//     stores the tenant with gate.ContextWithTenant, as your real auth
//     middleware would. It rejects nothing.
//   - your adapter, configured from the Setup.
//   - one handler per endpoint of [HTTPEndpoints] that counts its calls
//     ([Counter]), reports the actual cost a settle scenario names in
//     [ActualCostHeader] with [ReportActualCost] on the context it got from
//     your adapter, and answers 200;
//   - when [Setup.CatchAll] is set, your framework's catch-all for what no
//     route matches (Gin's NoRoute, Echo's RouteNotFound("/*"), a
//     ServeMux "/" pattern, gRPC's grpc.UnknownServiceHandler), behind
//     your adapter, counting its calls and answering 200 as the others.
//
// Then, in a test of your adapter's package:
//
//	func TestMain(m *testing.M) { conformance.Main(m) }
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
//			var calls conformance.Counter
//			h, err := myframework.New(...) // auth, then your middleware over s.Limiter, then handlers calling calls.Inc()
//			if err != nil {
//				return nil, err
//			}
//			return conformance.HandlerInstance(h, &calls), nil
//		}))
//	}
//
// and run it with a Redis at hand (REDIS_URL, or redis-server on PATH; the
// Cluster scenarios need redis-server and redis-cli; without either the
// tests skip, or fail under CI=true):
//
//	go test -race -run TestConformance ./...
//
// A failing scenario prints the transcript it expected and the one it got.
// To prove that a passing run means something, give [RunFailing] a
// deliberately wrong variant of your service (a realistic mistake in your
// framework's idiom) and the scenarios it must fail.
// The golden transcripts live in this module's testdata directory and are
// the same for every adapter; they are embedded in the package, so running
// the suite needs no files. After a deliberate change of the wire rules,
// regenerate them from this module with
//
//	go test ./ -run TestGolden -update
//
// and review the diff.
//
// # What is compared
//
// Scenarios whose numbers must be byte-identical run the limiter in
// client-clock mode on a fake clock the suite advances, so no scenario
// sleeps to refill a bucket. Scenarios about real time (a hung Redis
// bounded by the limiter's timeout) use the wall clock and assert bounds.
//
// For [ProtocolHTTP] targets the status, every rate-limit header,
// Retry-After, Content-Type and the body are compared; for [ProtocolGRPC]
// targets, the status (normalised to HTTP), the RateLimit,
// RateLimit-Policy and Retry-After values. For both: which Redis keys were
// written, read back from Redis, and how many requests reached the
// handlers.
package conformance
