// Package core is tollgate's rate limiter: per-tenant token buckets kept in
// Redis, checked and charged by one atomic Lua script, so that every replica
// of a service enforces the same limit whatever the number of replicas.
//
// # The model
//
// A bucket has a capacity (the largest burst, in tokens) and a refill rate
// (the sustained throughput, tokens per second). A request has a cost in
// tokens. The script refills lazily from the Redis server's clock, caps at
// capacity, and admits the request only if every bucket that applies (a
// class bucket and, optionally, a tenant-wide ceiling) holds at least the
// cost; then it charges them all, else none. [Request.Also] adds more
// classes of the same tenant to one check (the Envoy adapter decides a
// request's descriptors so).
//
// Keys are rl:{tenant}:bucket (see [Keys]); the braces are a Redis Cluster
// hash tag, so all of a tenant's buckets live in one slot.
//
// # Decisions and errors
//
// [Limiter.Check] returns a [Decision]: over quota is a value (Allowed false,
// ReasonOverLimit or ReasonCostExceedsCapacity), not an error. An error means
// the request was invalid or the store failed; the Decision then carries the
// failure policy's answer (fail-open or fail-closed). Adapters render a
// Decision with [Decision.Headers], [Decision.Status] and [Decision.Problem],
// and compute nothing themselves.
//
// # Identity
//
// The tenant comes from the verified token: an auth middleware calls
// [ContextWithTenant], and the adapters read it with [TenantFromContext].
//
// # The API, group by group
//
// Every exported name is here because a service, an adapter or a tool
// needs it (docs/api.md says what each one is for):
//
//   - [Limiter], [New], [Request], [Decision], [BucketState], [Reason]:
//     the check itself and its answer, for services that call the limiter
//     directly (jobs, queues) and for the adapters.
//   - [Gate], [NewGate], [Endpoint], [Route], [Routes], [CostFunc],
//     [Verdict], [Header], [Problem]: the request flow every adapter shares,
//     so that HTTP and gRPC adapters only translate a Verdict.
//   - [HeaderStyle] and its values, [ProblemContentType],
//     [UnauthenticatedProblem]: what clients see. Header names, metric
//     names and labels are wire contracts, written as literals and listed
//     in docs/semantics.md and docs/observability.md, not exported names.
//   - [Resolver], [TieredResolver], [NewResolver], [Tiers], [Tier], [Quota],
//     [Bucket], [Overrides], [ResolverStats]: where quotas come from (tier
//     defaults plus per-tenant overrides, for example the sqlquota module).
//   - [Tenant], [ContextWithTenant], [TenantFromContext]: identity, set by
//     the auth middleware.
//   - [Option], [GateOption], [ResolverOption] and the With* functions:
//     configuration; each option validates its value and states its
//     default, and [WithClock] is the one clock for all three constructors.
//   - [Keys], [EscapeID], [ValidateName], [ScriptSource]: the key scheme and
//     escaping, shared with the tollgate CLI and the override store so there
//     is one definition of a key.
//   - The Err* sentinels, the Max* limits and the Default* values: what
//     callers test with errors.Is, validate against and configure from.
package core
