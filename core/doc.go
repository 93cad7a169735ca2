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
// Keys are rl:{tenant}:bucket (see package keys); the braces are a Redis Cluster
// hash tag, so all of a tenant's buckets live in one slot.
//
// # Decisions and errors
//
// [Limiter.Check] returns a [Decision]: over quota is a value (Allowed false,
// ReasonOverLimit or ReasonCostExceedsCapacity), not an error. An error means
// the request was invalid or the store failed; the Decision then carries the
// failure policy's answer (fail-open or fail-closed). Package render turns a
// Decision into headers, a status and a problem body, so adapters compute
// nothing themselves.
//
// # The packages
//
// This package is the limiter and only the limiter
// (https://github.com/tollgate-go/tollgate/blob/main/docs/api.md says what each name is for):
//
//   - [Limiter], [New], [Request], [Decision], [BucketState], [Slot],
//     [Reason]: the check itself and its answer, for services that call the
//     limiter directly (jobs, queues) and for the adapters.
//   - [Limiter.Wait], [Limiter.Reserve], [Reservation]: waiting for tokens
//     instead of being denied, first come first served across the fleet
//     (workers sharing one upstream's quota).
//   - [Option] and the With* functions: configuration; each option
//     validates its value and states its default.
//   - The Err* sentinels, [FailurePolicy], [DefaultPrefix] and
//     [DefaultTimeout]: what callers test with errors.Is and configure from.
//
// Beside it: package quota says who gets what (tenants, quotas, tiers, the
// tiered resolver, override sources); package gate is the request flow the
// HTTP and gRPC adapters share (tenant from the context, route, check,
// verdict); package render is the wire form of a decision; package keys is
// the Redis key scheme; package lua holds the scripts' sources.
package core
