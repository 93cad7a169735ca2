// Package quota is who gets what: the verified [Tenant] a request is
// charged to, the [Quota] of a token bucket, the [Bucket]s that apply to a
// request, and where they come from: a [Resolver], most often the
// [TieredResolver] of [NewResolver] (tier defaults plus per-tenant
// [Overrides] cached in process).
//
// It imports nothing of the limiter (package core imports it), so a custom
// resolver or an override store (the sqlquota module) depends on this
// package alone. Its errors wrap core's sentinels (core.ErrInvalidConfig,
// core.ErrInvalidRequest, core.ErrResolve) or [ErrInvalid].
package quota
