// Package e2e holds the examples' end-to-end tests, and nothing else: they
// build the example binaries, run each as a real process on a free port
// against a real Redis and a SQLite file, and drive it over real
// connections with tokens minted by the built mint command, holding the
// six HTTP examples (net/http, Gin, Echo v4 and v5, Fiber v2 and v3) to the
// same answers and the gRPC service to the same quotas, and each to
// reserve-then-settle on POST /v1/complete; they check the settle's bound
// on four replicas beside charging the estimate only and charging after
// (TestSettleBound; `make test-settle` at full size), and that a process
// killed between reserve and settle leaves the estimate charged (a helper:
// this test binary started again, see helperRole); and they run the
// README's `make demo` and check its table and exit code.
//
//	cd examples && go test -race ./e2e
package e2e
