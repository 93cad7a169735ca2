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
// Routes are core's route model, [core.Routes]: [Config.Routes] holds the
// routes list ("GET /v1/profile", or "/healthz" for method *) and
// [Config.GRPCMethods] the grpc_methods list, service wildcards included.
// A Config hands out ready options, so wiring the file into any adapter
// takes a few lines:
//
//	cfg, err := config.Load("tiers.yaml")
//	resolver, err := cfg.NewResolver(core.WithOverrides(store)) // cache_ttl
//	lim, err := cfg.NewLimiter(client, resolver)                // key_prefix, failure_policy, timeout
//	gate, err := core.NewGate(lim, cfg.GateOptions()...)        // routes, header_style, anonymous_tier
//	mw := ginlimit.Middleware(gate)
//
// [Config.GateOptions] carries the route table, header_style and
// anonymous_tier to the one core.Gate every adapter takes (httplimit,
// ginlimit, echolimit, fiberlimit, grpclimit); [Config.LimiterOptions] and
// [Config.ResolverOptions] are the rest, for building core's types yourself.
//
// # Reloading
//
// [Watch] keeps a [core.TieredResolver]'s tiers in step with the file:
// whenever the file's contents change, and on the signals given with
// [WithSignals] (none unless asked), it parses the new file and swaps its
// tiers in atomically with SetTiers. A file is applied whole or not at
// all: an invalid file is refused and logged, and so is one whose tiers no
// longer serve the route table in force ([Config.CheckReload]); the
// previous configuration keeps serving. Write the file to a temporary file
// and rename it into place, so that it is never read half-written. See
// [Reloader].
package config
