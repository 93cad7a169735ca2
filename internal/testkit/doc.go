// Package testkit is the plumbing tollgate's own tests share beside the
// conformance suite: a limiter and a gate for an adapter's unit tests on
// the shared test Redis, a settable clock, a log buffer safe for
// concurrent writers, and an atomic file replacement for reload tests.
package testkit
