// Package faults holds tollgate's fault suite: Go tests that start and
// control real Redis processes (standalone and Cluster) and break them while
// limiters are under load: not running at start, killed and restarted,
// SCRIPT FLUSH, hung (SIGSTOP) and resumed, out of memory inside the script,
// a Cluster master killed (failover), and a client clock that jumps. Each
// scenario asserts the decision policy, a latency bound, no goroutine leak,
// and correct accounting afterwards. The measured matrix is written to
// docs/reliability.md with TOLLGATE_UPDATE_DOCS=1 and checked against it
// otherwise.
//
// The package has no code of its own: only tests.
package faults
