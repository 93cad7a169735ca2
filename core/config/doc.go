// Package config reads tollgate's tier configuration file: one documented
// YAML schema shared by every adapter (Gin, Echo, Fiber, net/http, gRPC).
//
// # The file
//
//	version: 1                  # optional; the schema version
//	default_tier: free          # required; the tier of a tenant that names none
//	anonymous_tier: anonymous   # optional; admit callers without a tenant on this tier, by IP
//	key_prefix: rl              # Redis key prefix (default rl)
//	failure_policy: open        # open | closed (default open)
//	timeout: 100ms              # bound on one Redis call (default 100ms, at most 1m)
//	cache_ttl: 45s              # override cache TTL (default 45s, at most 24h)
//	header_style: default       # or a list: [ietf, x-ratelimit, x-ratelimit-epoch, draft-06, none]
//	tiers:                      # required; at least one
//	  free:
//	    ceiling: {capacity: 100, refill_per_second: 5}   # optional tenant-wide bucket
//	    classes:                                         # required; at least one
//	      default: {capacity: 20, refill_per_second: 2}
//	      export:  {capacity: 10, refill_per_second: 0.1}
//	routes:                     # HTTP route pattern -> (class, cost); cost defaults to 1
//	  - {method: GET, path: /v1/profile, class: default, cost: 1}
//	  - {method: "*", path: /healthz, exempt: true}      # never limited
//	grpc_methods:               # full method (or /pkg.Svc/*) -> (class, cost)
//	  - {method: /acme.v1.Reports/Export, class: export, cost: 5}
//	  - {method: /acme.v1.Reports/*, class: default}
//	breaker: {threshold: 5, cooldown: 1s}  # circuit breaker per shard (threshold 0: off)
//	local_fallback: 0.25        # while Redis fails, local buckets at this share (default off)
//	deny_cache: false           # deny provably empty buckets locally (default false)
//	shadow: false               # every class in shadow mode (default false)
//	shadow_classes: [export]    # only these classes in shadow mode
//	leases:                     # token leases by class (default none)
//	  default: {size: 10, ttl: 1s}
//	batching: true              # pipeline concurrent checks (default true)
//
// [Load] and [Parse] validate everything before anything is used: unknown
// fields, duplicate keys, wrong types and out-of-range numbers are errors,
// each naming the file, the line and the field:
//
//	tiers.yaml:7: tiers.free.classes.export.capacity: must be > 0, got -1
//
// Every problem in the file is reported at once ([Error] holds them all).
// Beyond core's own quota rules, a route's class must exist in every tier and
// its cost must fit every tier's capacity, so that no configured request can
// fail to resolve or be impossible to admit.
//
// # Using it
//
// Routes are core's route model, [gate.Routes]: [Config.Routes] holds the
// routes list ("GET /v1/profile", or "/healthz" for method *) and
// [Config.GRPCMethods] the grpc_methods list, service wildcards included.
//
// [Open] builds what a service needs from the file, with one Close: the
// Redis client from one URL ([NewRedisClient]: redis://, rediss://,
// redis+cluster://, redis+sentinel://), the resolver, the limiter and the
// gate with the file's options, and the watch if asked:
//
//	svc, err := config.Open(ctx, "tiers.yaml",
//		config.WithRedisURL(os.Getenv("REDIS_URL")),
//		config.WithResolverOptions(quota.WithOverrides(store)),
//		config.WithWatch(config.WithSignals(syscall.SIGHUP)))
//	defer svc.Close()
//	r.Use(authenticate, ginlimit.Middleware(svc.Gate)) // svc.Limiter to a queue worker
//
// A Config also hands out the ready options Open uses, for building core's
// types yourself: [Config.LimiterOptions] (key_prefix, failure_policy,
// timeout and the deployment fields), [Config.ResolverOptions] (cache_ttl)
// and [Config.GateOptions] (the route table, header_style and
// anonymous_tier, for gate.New: the one gate every adapter takes).
//
// # Reloading
//
// [WithWatch] (with Open), or [Watch] over a resolver of your own, keeps a
// [quota.TieredResolver]'s tiers in step with the file:
// whenever the file's contents change, and on the signals given with
// [WithSignals] (none unless asked), it parses the new file and swaps its
// tiers in atomically with SetTiers. A file is applied whole or not at
// all: an invalid file is refused and logged, and so is one whose tiers no
// longer serve the route table in force ([Config.CheckReload]); the
// previous configuration keeps serving. Write the file to a temporary file
// and rename it into place, so that it is never read half-written. See
// [Reloader].
package config
