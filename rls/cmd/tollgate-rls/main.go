// Command tollgate-rls is tollgate's Envoy rate limit service: it answers
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from the same
// buckets, tiers and overrides as the services behind the gateway (see
// docs/envoy.md).
//
// Environment:
//
//	ADDR             gRPC listen address (default 127.0.0.1:8081)
//	REDIS_URL        the Redis the services use: redis://, rediss://,
//	                 redis+cluster:// or redis+sentinel:// (default: an embedded
//	                 in-process Redis-compatible server, for trying it out)
//	TOLLGATE_CONFIG  the services' tier file (default: built-in tiers free
//	                 and pro); reloaded on change and on SIGHUP
//	DATABASE_URL     per-tenant overrides in PostgreSQL (postgres://...;
//	                 default: none)
//	METRICS_ADDR     Prometheus /metrics listen address (default
//	                 127.0.0.1:9464; "off" disables it)
//	RLS_CONFIG       an envoyproxy/ratelimit configuration (a file, or a
//	                 directory of *.yaml files; default: none, or the
//	                 reference's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
//	                 when RUNTIME_ROOT is set): descriptors are answered by
//	                 its rules; reloaded on change, the old one kept when a
//	                 new one is invalid
//	SHADOW_MODE      true: every request is answered OK, the statuses keep
//	                 their codes (with RLS_CONFIG)
//	RLS_DESCRIPTOR_LIMITS  false: a descriptor's limit override is ignored
//	                 (default true with a configuration, as the reference)
//	RLS_TRUST_TIER   true: without RLS_CONFIG, a descriptor's tier entry is
//	                 the tenant's tier (only when the gateway fills it from
//	                 the verified token; default false: the default tier)
//
// envoyproxy/ratelimit's own environment (GRPC_HOST, GRPC_PORT, HOST, PORT,
// REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_URL as host:port, RUNTIME_ROOT, ...,
// LIMIT_RESPONSE_HEADERS_ENABLED, GRPC_SERVER_USE_TLS) is read with the
// reference's defaults once any of its names is set; the names above win
// when both are set (settings.go; docs/envoy.md, "Migrating a deployment").
//
// The gRPC server also serves the standard health service and server
// reflection, and HTTP /healthcheck on the metrics listener (and on the
// reference's HOST:PORT). SIGTERM or SIGINT stops it gracefully: the health service
// turns NOT_SERVING, calls in flight finish (at most 10 s), then it exits.
//
// "tollgate-rls convert" turns an envoyproxy/ratelimit configuration into a
// tollgate tier file.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate-go/tollgate/core/config"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "convert":
			os.Exit(convertMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case "-h", "--help", "help":
			usage(os.Stdout)
			return
		case "-version", "--version", "version":
			fmt.Println(config.BuildVersion("tollgate-rls"))
			return
		default:
			usage(os.Stderr)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-rls:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  tollgate-rls                      serve (env ADDR, REDIS_URL, TOLLGATE_CONFIG, DATABASE_URL, METRICS_ADDR,
                                    RLS_CONFIG, SHADOW_MODE, RLS_DESCRIPTOR_LIMITS, RLS_TRUST_TIER)
                                    or envoyproxy/ratelimit's own environment (docs/envoy.md, "Migrating")
  tollgate-rls convert [file.yaml]  envoyproxy/ratelimit YAML (file or stdin) to a tollgate tier file on stdout
  tollgate-rls --version            the build's version, commit and Go version
`)
}
