package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// settings is what the environment asks for, read once by readSettings:
// tollgate's own names and envoyproxy/ratelimit's (the reference's, from its
// src/settings/settings.go), so that tollgate-rls starts where the
// reference runs with only the image changed (docs/envoy.md, "Migrating").
type settings struct {
	// reference: the environment sets one of the reference's own names,
	// so every one of them is read with the reference's default
	reference bool

	grpcNetwork, grpcAddr string // "tcp" or "unix"
	httpAddr              string // /healthcheck; "" serves none
	metricsAddr           string // "off" serves none
	metricsPath           string
	redisRef              *refRedis // REDIS_URL in the reference's form; nil: tollgate's URL
	rulesPath             string    // the reference's RUNTIME_ROOT/SUBDIRECTORY/APPDIRECTORY; "" none
	logLevel              slog.Level
	logJSON               bool

	tlsCert, tlsKey, clientCA, clientSAN string // GRPC_SERVER_USE_TLS
	useTLS                               bool
	maxConnAge, maxConnAgeGrace          time.Duration

	limitHeaders                     bool
	limitHdr, remainingHdr, resetHdr string
	forceStart, healthyWithConfig    bool
	xds                              bool         // CONFIG_TYPE=GRPC_XDS_SOTW: the configuration over xDS
	xdsClient                        *xdsSettings // with xds
	denyCache                        bool
	keyPrefix                        string
	quotaMode, dynamicMetadata       bool // QUOTA_MODE, RESPONSE_DYNAMIC_METADATA
	mergeDomains                     bool // MERGE_DOMAIN_CONFIG: files of one domain merged

	// notes are the settings accepted without effect, logged once each
	notes []string
}

// refRedis is the reference's Redis settings, used when REDIS_URL has no
// scheme (host:port, a comma list, or a socket path).
type refRedis struct {
	socketType, typ, url, auth, sentinelAuth string
	poolSize                                 int
	timeout                                  time.Duration
	tls, skipVerify                          bool
	cert, key, ca                            string
}

// envSetting is one of the reference's environment variables: its name,
// its default (the reference's), and what tollgate-rls does with it. use
// is called with the value, or the default when it is unset; it returns an
// error to stop the start (a value that cannot be honoured, naming what to
// use instead). With use nil the setting does not matter here: note says
// why, logged once when it is set.
type envSetting struct {
	name, def string
	use       func(s *settings, v string) error
	note      string
}

// referenceEnv is every setting of envoyproxy/ratelimit's settings.go (at
// the version the differential test runs), and the variables Envoy
// Gateway's Deployment sets beside them. They are applied in this order,
// which some rely on: HOST before PORT, GRPC_HOST before GRPC_PORT (then
// GRPC_UDS), RUNTIME_ROOT before its subdirectories, DISABLE_STATS and
// USE_PROMETHEUS before PROMETHEUS_ADDR.
var referenceEnv = []envSetting{
	// listeners
	{"HOST", "0.0.0.0", func(s *settings, v string) error { s.httpAddr = v; return nil }, ""},
	{"PORT", "8080", func(s *settings, v string) error { return hostPort(&s.httpAddr, "PORT", v) }, ""},
	{"DEBUG_HOST", "0.0.0.0", nil, "the reference's debug listener (pprof, /stats, /rlconfig) is not served; metrics are on USE_PROMETHEUS's listener"},
	{"DEBUG_PORT", "6070", nil, "the reference's debug listener (pprof, /stats, /rlconfig) is not served; metrics are on USE_PROMETHEUS's listener"},
	{"GRPC_HOST", "0.0.0.0", func(s *settings, v string) error { s.grpcAddr = v; return nil }, ""},
	{"GRPC_PORT", "8081", func(s *settings, v string) error { return hostPort(&s.grpcAddr, "GRPC_PORT", v) }, ""},
	{"GRPC_UDS", "", func(s *settings, v string) error {
		if v != "" {
			s.grpcNetwork, s.grpcAddr = "unix", v
		}
		return nil
	}, ""},
	{"GRPC_MAX_CONNECTION_AGE", "24h", durationInto(func(s *settings) *time.Duration { return &s.maxConnAge }), ""},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", durationInto(func(s *settings) *time.Duration { return &s.maxConnAgeGrace }), ""},
	{"GRPC_SERVER_USE_TLS", "false", boolInto(func(s *settings) *bool { return &s.useTLS }), ""},
	{"GRPC_SERVER_TLS_CERT", "", func(s *settings, v string) error { s.tlsCert = v; return nil }, ""},
	{"GRPC_SERVER_TLS_KEY", "", func(s *settings, v string) error { s.tlsKey = v; return nil }, ""},
	{"GRPC_CLIENT_TLS_CACERT", "", func(s *settings, v string) error { s.clientCA = v; return nil }, ""},
	{"GRPC_CLIENT_TLS_SAN", "", func(s *settings, v string) error { s.clientSAN = v; return nil }, ""},
	{"GRPC_SERVER_TLS_CA_CERT", "", nil, "not one of the reference's settings (Envoy Gateway sets it; the reference ignores it): client certificates are required only with GRPC_CLIENT_TLS_CACERT"},

	// logging
	{"LOG_LEVEL", "WARN", func(s *settings, v string) error {
		l, ok := logLevels[strings.ToLower(v)]
		if !ok {
			return fmt.Errorf("LOG_LEVEL: want trace, debug, info, warn, error, fatal or panic, got %q", v)
		}
		s.logLevel = l
		return nil
	}, ""},
	{"LOG_FORMAT", "text", func(s *settings, v string) error {
		switch strings.ToLower(v) {
		case "text":
		case "json":
			s.logJSON = true
		default:
			return fmt.Errorf("LOG_FORMAT: want text or json, got %q", v)
		}
		return nil
	}, ""},

	// the rate limit configuration
	{"CONFIG_TYPE", "FILE", func(s *settings, v string) error {
		switch strings.ToUpper(v) {
		case "FILE":
			return nil
		case "GRPC_XDS_SOTW":
			s.xds = true
			return nil
		}
		return fmt.Errorf("CONFIG_TYPE: want FILE or GRPC_XDS_SOTW, got %q", v)
	}, ""},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", boolInto(func(s *settings) *bool { return &s.forceStart }), ""},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", boolInto(func(s *settings) *bool { return &s.healthyWithConfig }), ""},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", func(s *settings, v string) error { s.rulesPath = v; return nil }, ""},
	{"RUNTIME_SUBDIRECTORY", "", func(s *settings, v string) error { s.rulesPath = filepath.Join(s.rulesPath, v); return nil }, ""},
	{"RUNTIME_APPDIRECTORY", "config", func(s *settings, v string) error { s.rulesPath = filepath.Join(s.rulesPath, v); return nil }, ""},
	{"RUNTIME_IGNOREDOTFILES", "false", nil, "files whose names start with a dot are always skipped"},
	{"RUNTIME_WATCH_ROOT", "true", nil, "the configuration directory's files are polled every second either way, so a change is seen whether the root or the directory is swapped"},
	{"MERGE_DOMAIN_CONFIG", "false", boolInto(func(s *settings) *bool { return &s.mergeDomains }), ""},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", readByXDS, ""},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", readByXDS, ""},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", readByXDS, ""},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", nil, "a failed xDS connection is retried on XDS_CLIENT_BACKOFF_* alone"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", readByXDS, ""},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", readByXDS, ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", readByXDS, ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", readByXDS, ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", readByXDS, ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", readByXDS, ""},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", readByXDS, ""},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", readByXDS, ""},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", readByXDS, ""},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", readByXDS, ""},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", readByXDS, ""},

	// statistics
	{"USE_STATSD", "true", refuseTrue("USE_STATSD", "statsd is not sent: set USE_STATSD=false and USE_PROMETHEUS=true (or METRICS_ADDR) for Prometheus metrics"), ""},
	{"USE_DOG_STATSD", "false", refuseTrue("USE_DOG_STATSD", "DogStatsD is not sent: unset it and use USE_PROMETHEUS=true (or METRICS_ADDR)"), ""},
	{"USE_DOG_STATSD_MOGRIFIERS", "", nil, "statsd is not sent"},
	{"STATSD_HOST", "localhost", nil, "statsd is not sent"},
	{"STATSD_PORT", "8125", nil, "statsd is not sent"},
	{"EXTRA_TAGS", "", nil, "statsd is not sent"},
	{"STATS_FLUSH_INTERVAL", "10s", nil, "Prometheus metrics are read when scraped"},
	{"DISABLE_STATS", "false", func(s *settings, v string) error {
		on, err := parseBool("DISABLE_STATS", v)
		if on && s.metricsAddr == "" { // METRICS_ADDR wins
			s.metricsAddr = "off"
		}
		return err
	}, ""},
	{"USE_PROMETHEUS", "false", func(s *settings, v string) error {
		on, err := parseBool("USE_PROMETHEUS", v)
		if !on && s.metricsAddr == "" {
			s.metricsAddr = "off"
		}
		return err
	}, ""},
	{"PROMETHEUS_ADDR", ":9090", func(s *settings, v string) error {
		if s.metricsAddr == "" {
			s.metricsAddr = v
		}
		return nil
	}, ""},
	{"PROMETHEUS_PATH", "/metrics", func(s *settings, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("PROMETHEUS_PATH: want a path starting with /, got %q", v)
		}
		s.metricsPath = v
		return nil
	}, ""},
	{"PROMETHEUS_MAPPER_YAML", "", nil, "it maps the reference's statsd names; tollgate's metrics have their own names (docs/observability.md)"},

	// the store
	{"BACKEND_TYPE", "redis", func(s *settings, v string) error {
		if strings.ToLower(v) == "redis" {
			return nil
		}
		return fmt.Errorf("BACKEND_TYPE=%s: tollgate-rls keeps its buckets in Redis only; set BACKEND_TYPE=redis and REDIS_URL", v)
	}, ""},
	{"REDIS_SOCKET_TYPE", "unix", func(s *settings, v string) error { s.redisRef.socketType = strings.ToLower(v); return nil }, ""},
	{"REDIS_TYPE", "SINGLE", func(s *settings, v string) error { s.redisRef.typ = strings.ToLower(v); return nil }, ""},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", func(s *settings, v string) error { s.redisRef.url = v; return nil }, ""},
	{"REDIS_POOL_SIZE", "10", func(s *settings, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("REDIS_POOL_SIZE: want a positive number, got %q", v)
		}
		s.redisRef.poolSize = n
		return nil
	}, ""},
	{"REDIS_AUTH", "", func(s *settings, v string) error { s.redisRef.auth = v; return nil }, ""},
	{"REDIS_SENTINEL_AUTH", "", func(s *settings, v string) error { s.redisRef.sentinelAuth = v; return nil }, ""},
	{"REDIS_TLS", "false", boolInto(func(s *settings) *bool { return &s.redisRef.tls }), ""},
	{"REDIS_TLS_CLIENT_CERT", "", func(s *settings, v string) error { s.redisRef.cert = v; return nil }, ""},
	{"REDIS_TLS_CLIENT_KEY", "", func(s *settings, v string) error { s.redisRef.key = v; return nil }, ""},
	{"REDIS_TLS_CACERT", "", func(s *settings, v string) error { s.redisRef.ca = v; return nil }, ""},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", boolInto(func(s *settings) *bool { return &s.redisRef.skipVerify }), ""},
	{"REDIS_TIMEOUT", "10s", durationInto(func(s *settings) *time.Duration { return &s.redisRef.timeout }), ""},
	{"REDIS_PIPELINE_WINDOW", "0", nil, "checks are batched by the limiter itself"},
	{"REDIS_PIPELINE_LIMIT", "0", nil, "checks are batched by the limiter itself"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", func(s *settings, v string) error {
		if strings.ToUpper(v) != "WAIT" {
			return fmt.Errorf("REDIS_POOL_ON_EMPTY_BEHAVIOR=%s: only WAIT is supported (as by the reference, which stops on the others)", v)
		}
		return nil
	}, ""},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", nil, "/healthcheck does not ask Redis: a store outage is answered by the tier file's failure policy"},
	{"REDIS_PERSECOND", "false", refuseTrue("REDIS_PERSECOND", "per-second rules in a second Redis are not supported: a request's descriptors are decided in one all-or-nothing call on one store; unset REDIS_PERSECOND and every rule, per-second ones included, is kept in REDIS_URL's store"), ""},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_AUTH", "", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_TLS", "false", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_TIMEOUT", "10s", nil, "read only with REDIS_PERSECOND=true"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", nil, "read only with REDIS_PERSECOND=true"},
	{"MEMCACHE_HOST_PORT", "", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV", "", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV_REFRESH", "0", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS", "false", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CACERT", "", nil, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", nil, "read only with BACKEND_TYPE=memcache"},

	// answers
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", nil, "a bucket's key expires when it is full again, not at a window's end"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", func(s *settings, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES: want 0 or a positive number, got %q", v)
		}
		s.denyCache = n > 0 // the deny cache: its size follows the denied buckets, not this figure
		return nil
	}, ""},
	{"NEAR_LIMIT_RATIO", "0.8", func(s *settings, v string) error {
		if f, err := strconv.ParseFloat(v, 32); err != nil || f < 0 || f > 1 {
			return fmt.Errorf("NEAR_LIMIT_RATIO: want a number from 0 to 1, got %q", v)
		}
		return nil // it only counts the reference's near_limit statistic, which tollgate has not
	}, ""},
	{"CACHE_KEY_PREFIX", "", func(s *settings, v string) error { s.keyPrefix = v; return nil }, ""},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", nil, "a denied request is never charged in tollgate, whatever this says (docs/envoy.md, differences)"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", boolInto(func(s *settings) *bool { return &s.limitHeaders }), ""},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", func(s *settings, v string) error { s.limitHdr = v; return nil }, ""},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", func(s *settings, v string) error { s.remainingHdr = v; return nil }, ""},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", func(s *settings, v string) error { s.resetHdr = v; return nil }, ""},
	{"SHADOW_MODE", "false", nil, ""}, // shared with tollgate: read by rulesEnv
	{"QUOTA_MODE", "false", boolInto(func(s *settings) *bool { return &s.quotaMode }), ""},
	{"RESPONSE_DYNAMIC_METADATA", "false", boolInto(func(s *settings) *bool { return &s.dynamicMetadata }), ""},

	// tracing
	{"TRACING_ENABLED", "false", nil, "tollgate-rls exports no traces"},
	{"TRACING_SERVICE_NAME", "RateLimit", nil, "tollgate-rls exports no traces"},
	{"TRACING_SERVICE_NAMESPACE", "", nil, "tollgate-rls exports no traces"},
	{"TRACING_SERVICE_INSTANCE_ID", "", nil, "tollgate-rls exports no traces"},
	{"TRACING_EXPORTER_PROTOCOL", "http", nil, "tollgate-rls exports no traces"},
	{"TRACING_SAMPLING_RATE", "1", nil, "tollgate-rls exports no traces"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", nil, "tollgate-rls exports no traces"},
}

// sharedEnv are the names tollgate and the reference both read: setting
// them alone does not make the environment the reference's (REDIS_URL does
// when it has no scheme).
var sharedEnv = map[string]bool{"REDIS_URL": true, "SHADOW_MODE": true}

// logLevels are logrus's level names, as the reference reads LOG_LEVEL.
var logLevels = map[string]slog.Level{
	"trace": slog.LevelDebug, "debug": slog.LevelDebug, "info": slog.LevelInfo,
	"warn": slog.LevelWarn, "warning": slog.LevelWarn,
	"error": slog.LevelError, "fatal": slog.LevelError, "panic": slog.LevelError,
}

// readSettings reads the environment. The reference's names are read only
// when one of them (other than sharedEnv) is set, or REDIS_URL has no
// scheme: then every one takes the reference's default when unset, and
// tollgate's own names (ADDR, METRICS_ADDR, RLS_CONFIG, a REDIS_URL with a
// scheme) win over them when both are set.
func readSettings(getenv func(string) string) (*settings, error) {
	s := &settings{grpcNetwork: "tcp", grpcAddr: cmp.Or(getenv("ADDR"), defaultAddr), metricsAddr: cmp.Or(getenv("METRICS_ADDR"), defaultMetricsAddr), metricsPath: "/metrics", logLevel: slog.LevelInfo}
	u := getenv("REDIS_URL")
	s.reference = u != "" && !strings.Contains(u, "://")
	for _, e := range referenceEnv {
		if !sharedEnv[e.name] && getenv(e.name) != "" {
			s.reference = true
		}
	}
	if !s.reference {
		return s, nil
	}
	s.grpcAddr, s.metricsAddr = "", getenv("METRICS_ADDR")
	s.redisRef = &refRedis{}
	for _, e := range referenceEnv {
		v, set := getenv(e.name), getenv(e.name) != ""
		switch {
		case e.name == "USE_STATSD" && !set:
			// the reference's default is true, which cannot be honoured:
			// only an explicit true stops the start, as most deployments
			// leave it unset
			s.notes = append(s.notes, "USE_STATSD: unset (the reference's default is true): statsd is not sent; set USE_STATSD=false and USE_PROMETHEUS=true for Prometheus metrics")
		case e.use != nil:
			if err := e.use(s, cmp.Or(v, e.def)); err != nil {
				if !strings.HasPrefix(err.Error(), e.name) {
					err = fmt.Errorf("%s: %w", e.name, err)
				}
				return nil, err
			}
		case set && e.note != "":
			s.notes = append(s.notes, e.name+": accepted, without effect: "+e.note)
		}
	}
	// tollgate's own names win
	if a := getenv("ADDR"); a != "" {
		s.grpcNetwork, s.grpcAddr = "tcp", a
	}
	if strings.Contains(u, "://") {
		s.redisRef = nil
		for _, n := range []string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS", "REDIS_POOL_SIZE", "REDIS_TIMEOUT"} {
			if getenv(n) != "" {
				s.notes = append(s.notes, n+": not read: REDIS_URL has a scheme, and says it all")
			}
		}
	}
	if getenv("RLS_CONFIG") != "" {
		s.rulesPath = ""
	}
	if s.useTLS && (s.tlsCert == "" || s.tlsKey == "") {
		return nil, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if s.xds {
		x, err := xdsSettingsFromEnv(getenv)
		if err != nil {
			return nil, err
		}
		s.xdsClient = &x
	}
	return s, nil
}

// hostPort puts port on the host already in *addr.
func hostPort(addr *string, name, port string) error {
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s: want a port number, got %q", name, port)
	}
	*addr = net.JoinHostPort(*addr, port)
	return nil
}

func parseBool(name, v string) (bool, error) {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: want true or false, got %q", name, v)
	}
	return on, nil
}

func boolInto(field func(*settings) *bool) func(*settings, string) error {
	return func(s *settings, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*field(s) = on
		return nil
	}
}

func durationInto(field func(*settings) *time.Duration) func(*settings, string) error {
	return func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 10s, got %q", v)
		}
		*field(s) = d
		return nil
	}
}

// refuseTrue is a setting whose true cannot be honoured: it stops the start
// with what to do instead.
func refuseTrue(name, instead string) func(*settings, string) error {
	return func(_ *settings, v string) error {
		on, err := parseBool(name, v)
		if err != nil || !on {
			return err
		}
		return fmt.Errorf("%s=%s: %s", name, v, instead)
	}
}

// open returns a client of the reference's Redis settings: REDIS_TYPE
// SINGLE (REDIS_URL one address, host:port or with REDIS_SOCKET_TYPE=unix a
// socket path), CLUSTER (a comma list of nodes) or SENTINEL (the master's
// name, then a comma list of Sentinels); REDIS_AUTH is a password or
// user:password.
func (r *refRedis) open() (redis.UniversalClient, string, error) {
	user, pass := "", r.auth
	if u, p, ok := strings.Cut(r.auth, ":"); ok {
		user, pass = u, p
	}
	var tc *tls.Config
	if r.tls {
		var err error
		if tc, err = clientTLS(r.cert, r.key, r.ca, r.skipVerify); err != nil {
			return nil, "", fmt.Errorf("REDIS_TLS: %w", err)
		}
	}
	switch r.socketType {
	case "tcp", "unix":
	default:
		return nil, "", fmt.Errorf("REDIS_SOCKET_TYPE: want tcp or unix, got %q", r.socketType)
	}
	urls := strings.Split(r.url, ",")
	where := fmt.Sprintf("%s %s %s", r.typ, r.socketType, r.url)
	switch r.typ {
	case "single":
		return redis.NewClient(&redis.Options{Network: r.socketType, Addr: r.url, Username: user, Password: pass, TLSConfig: tc,
			PoolSize: r.poolSize, DialTimeout: r.timeout, ReadTimeout: r.timeout, WriteTimeout: r.timeout}), where, nil
	case "cluster":
		if r.socketType != "tcp" {
			return nil, "", errors.New("REDIS_TYPE=CLUSTER needs REDIS_SOCKET_TYPE=tcp")
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: urls, Username: user, Password: pass, TLSConfig: tc,
			PoolSize: r.poolSize, DialTimeout: r.timeout, ReadTimeout: r.timeout, WriteTimeout: r.timeout}), where, nil
	case "sentinel":
		if len(urls) < 2 {
			return nil, "", errors.New("REDIS_TYPE=SENTINEL: REDIS_URL must be the master's name and the Sentinels: <master name>,<sentinel1>,...,<sentineln>")
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: urls[0], SentinelAddrs: urls[1:], SentinelPassword: r.sentinelAuth,
			Username: user, Password: pass, TLSConfig: tc,
			PoolSize: r.poolSize, DialTimeout: r.timeout, ReadTimeout: r.timeout, WriteTimeout: r.timeout}), where, nil
	}
	return nil, "", fmt.Errorf("REDIS_TYPE: want SINGLE, CLUSTER or SENTINEL, got %q", r.typ)
}

// clientTLS is a client's TLS configuration: a certificate to present when
// cert is set, the CA to trust when ca is set (else the system's).
func clientTLS(cert, key, ca string, skipVerify bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify} //nolint:gosec // the reference's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
	if cert != "" || key != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{kp}
	}
	if ca != "" {
		pool, err := certPool(ca)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	return c, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}

// serverTLS is the gRPC server's TLS configuration (GRPC_SERVER_USE_TLS):
// its certificate, and with GRPC_CLIENT_TLS_CACERT a client certificate
// signed by that CA required (and with GRPC_CLIENT_TLS_SAN, naming that
// DNS name), as the reference's.
//
// The certificate is read again when its files change (looked at once a
// second at most, on a handshake), as the reference's; a pair that does not
// load is logged and the previous one kept.
func (s *settings) serverTLS(log *slog.Logger) (*tls.Config, error) {
	r := &certReloader{cert: s.tlsCert, key: s.tlsKey, log: log}
	if err := r.load(); err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: %w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get, ClientAuth: tls.NoClientCert}
	if s.clientCA == "" {
		return c, nil
	}
	var err error
	if c.ClientCAs, err = certPool(s.clientCA); err != nil {
		return nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %w", err)
	}
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if san := s.clientSAN; san != "" {
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, ch := range chains {
				if len(ch) > 0 && ch[0].VerifyHostname(san) == nil {
					return nil
				}
			}
			return fmt.Errorf("the client certificate does not name %q", san)
		}
	}
	return c, nil
}

// limiterOptions are the limiter's options the settings add to the tier
// file's (which they override): metrics, the deny cache
// (LOCAL_CACHE_SIZE_IN_BYTES) and the key prefix (CACHE_KEY_PREFIX).
func (s *settings) limiterOptions(mp *sdkmetric.MeterProvider) []core.Option {
	opts := []core.Option{core.WithMeterProvider(mp)}
	if s.denyCache {
		opts = append(opts, core.WithDenyCache(true))
	}
	if s.keyPrefix != "" {
		opts = append(opts, core.WithPrefix(s.keyPrefix))
	}
	return opts
}

// grpcOptions are the gRPC server's options: the reference's connection
// age (with the reference's environment) and TLS (GRPC_SERVER_USE_TLS).
func (s *settings) grpcOptions(log *slog.Logger) ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if s.reference {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.maxConnAge, MaxConnectionAgeGrace: s.maxConnAgeGrace}))
	}
	if s.useTLS {
		c, err := s.serverTLS(log)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(c)))
	}
	return opts, nil
}

// grpcAddrName and metricsAddrName name the variables an address came
// from, for a listen error.
func (s *settings) grpcAddrName(getenv func(string) string) string {
	switch {
	case getenv("ADDR") != "" || !s.reference:
		return "ADDR"
	case s.grpcNetwork == "unix":
		return "GRPC_UDS"
	}
	return "GRPC_HOST, GRPC_PORT"
}

func (s *settings) metricsAddrName(getenv func(string) string) string {
	if getenv("METRICS_ADDR") != "" || !s.reference {
		return "METRICS_ADDR"
	}
	return "PROMETHEUS_ADDR"
}

// certReloader serves a certificate read from its files, read again when
// they change.
type certReloader struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	pair    *tls.Certificate
	stamp   string    // the files' sizes and times when pair was read
	checked time.Time // when the files were last looked at
}

// fileStamp summarizes the files' sizes and modification times.
func fileStamp(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d %d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// load reads the pair.
func (r *certReloader) load() error {
	st := fileStamp(r.cert, r.key)
	kp, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return err
	}
	r.pair, r.stamp = &kp, st
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= time.Second {
		r.checked = now
		if st := fileStamp(r.cert, r.key); st != r.stamp {
			if err := r.load(); err != nil {
				r.stamp = st // logged once for this change
				r.log.Error("the gRPC server's certificate not reloaded; the previous one stays", "cert", r.cert, "key", r.key, "err", err)
			} else {
				r.log.Info("the gRPC server's certificate reloaded", "cert", r.cert)
			}
		}
	}
	return r.pair, nil
}
