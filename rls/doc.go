// Package rls is tollgate's Envoy adapter: an Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over
// [github.com/tollgate-go/tollgate/core], so that Envoy, Istio and
// Envoy-based gateways charge the same buckets as the services behind them.
// The decision and its headers come from core; rls works out only what
// Envoy's protocol asks for beyond them, a descriptor's limit_remaining and
// duration_until_reset, from the bucket state core reports.
//
//	srv, err := rls.New(lim) // lim: the same *core.Limiter setup as the services
//	g := grpc.NewServer()
//	rlsv3.RegisterRateLimitServiceServer(g, srv)
//
// # In place of envoyproxy/ratelimit
//
// With [WithRules], descriptors are answered by an envoyproxy/ratelimit
// configuration, read by [LoadConfig] from the reference's own YAML files,
// as the reference answers them: each descriptor matched against its
// domain's nested rules (key and value, then a wildcard, then the key
// alone), unmatched descriptors OK without a limit, hits_addend per
// descriptor (0 checks without charging), limit_remaining 0 on a denial,
// unlimited, shadow_mode, quota_mode and replaces. Each rule is a token
// bucket (capacity requests_per_unit, refilled over the unit) keyed in
// core's scheme, hash-tagged by the domain and the descriptor's entries; a
// rule's tollgate block names the entry that is the tenant instead, and
// the bucket is then the services' (tenant, class), with the tier file's
// quota and the overrides store:
//
//	cfg, err := rls.LoadConfig("/etc/ratelimit/config")
//	rules, err := rls.NewRules(cfg, tiers) // tiers: the services' *quota.TieredResolver
//	lim, err := core.New(client, tiers)    // the services' limiter, as it is
//	srv, err := rls.New(lim, rls.WithRules(rules))
//	done := rules.Watch(ctx, "/etc/ratelimit/config", time.Second, logger)
//
// The server passes the limiter the buckets of the rules it matched a
// request against with its check (core.Request's Resolved): a request is
// decided on the one configuration it was matched against, and the
// limiter's resolver is asked only for the services' classes (a limiter
// given the [Rules] themselves, a quota.Resolver too, works alike).
//
// https://github.com/tollgate-go/tollgate/blob/main/docs/envoy.md#differences-by-design lists the differences by design (the bucket's
// duration_until_reset, a denial charging nothing, all or nothing among the
// descriptors of one tag and cost).
//
// # Mapping without a configuration
//
// Each descriptor names a tenant and a class by its entries; other entries
// are ignored:
//
//   - "tenant" (required): the tenant ID, as the gateway verified it (a JWT
//     claim, never a header the client sets);
//   - "tier" (optional, read only with [WithTrustedTier]): the tenant's
//     tier; without it the resolver's default tier and the tenant's
//     overrides apply;
//   - "class" (optional): the class, default "default".
//
// The cost is the descriptor's hits_addend where set (0 checks without
// charging, as envoyproxy/ratelimit), else the request's, where 0 means 1.
// With [WithTiers], a tier or class the tier file does not define is
// answered invalid before any check. The bucket is core's key rl:{tenant}:class, so a
// gateway check and a service check of the same tenant and class drain one
// bucket.
//
// The descriptors of one tenant (same tier), whatever their hits_addend,
// are decided in one script call (core.Request.Also, each class with its
// own cost in core.Request.AlsoCosts): all are charged or none is, so a
// request denied by one of its classes costs the others nothing, and the
// tenant ceiling is charged once, the largest cost. Descriptors of
// different tenants are separate calls (their buckets live in different
// Cluster slots). A class named twice at one cost is one bucket, charged
// once; at different costs, charged their sum. Beyond 16 classes a
// tenant's descriptors go in further calls.
//
// # Answers
//
// OverallCode is OVER_LIMIT when a descriptor is over its limit. Each
// DescriptorStatus carries current_limit (the bucket's sustained rate in
// requests per unit, named after the bucket), limit_remaining (whole tokens
// left) and duration_until_reset (until the bucket is full).
// response_headers_to_add carries exactly the headers core renders for the
// HTTP adapters for the same decision (RateLimit, RateLimit-Policy,
// X-RateLimit-*, Retry-After on a denial; [WithHeaderStyle]); a denial also
// carries the same problem+json body (raw_body) and its Content-Type.
//
// A descriptor with is_negative_hits (Envoy's apply_on_stream_done, when
// the request ends) refunds its cost to its buckets, never above their
// capacity, or, for a class with a concurrency limit under
// [WithSlotHold], frees a slot its hit took; a denied hit's negative hit
// does nothing. It is answered OK.
//
// A descriptor without a tenant, with an invalid tenant or class, or with a
// cost above [WithMaxCost] is answered
// OVER_LIMIT with the reason in its current_limit name, and nothing in the
// request is charged (the other descriptors answer UNKNOWN). A descriptor
// whose tier or class has no quota is answered OVER_LIMIT the same way:
// a configuration mistake never becomes unlimited traffic.
//
// Shadow mode (core.WithShadow) answers OK and counts what it would have
// denied. When the store fails, the limiter's failure policy answers:
// fail-open answers OK without rate-limit headers; fail-closed answers the
// gRPC status Unavailable, which Envoy turns into a denial only with
// failure_mode_deny: true (see
// https://github.com/tollgate-go/tollgate/blob/main/docs/envoy.md#store-failures-and-failure_mode_deny).
//
// # Rate limit quotas
//
// [QuotaService] serves Envoy's rate limit quota service (RLQS) over the
// same limiter: each Envoy enforces a token bucket it is assigned and
// reports its usage on one stream; every assignment is reserved from the
// tenant's shared bucket before it is sent, and the bucket's rate is
// divided among the Envoys by their demand:
//
//	qs, err := rls.NewQuotaService(lim, client) // client: the limiter's Redis
//	rlqsv3.RegisterRateLimitQuotaServiceServer(g, qs)
package rls
