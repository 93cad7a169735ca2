package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls"
	"github.com/tollgate-go/tollgate/sqlquota"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"
)

const (
	defaultAddr        = "127.0.0.1:8081"
	defaultMetricsAddr = "127.0.0.1:9464"
	shutdownTimeout    = 10 * time.Second
)

// builtinFile is the tier file without TOLLGATE_CONFIG: the examples'
// own tiers, so that the gateway and the example services agree out of the
// box.
const builtinFile = `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
      export: {capacity: 10, refill_per_second: 0.1}
  pro:
    classes:
      default: {capacity: 200, refill_per_second: 50}
      export: {capacity: 100, refill_per_second: 2}
`

// builtinConfig parses builtinFile.
func builtinConfig() (*config.Config, error) {
	return config.Parse("built-in tiers", []byte(builtinFile))
}

// builtinTiers are builtinFile's tiers.
func builtinTiers() quota.Tiers {
	cfg, err := builtinConfig()
	if err != nil {
		panic("tollgate-rls: the built-in tier file is invalid: " + err.Error())
	}
	return cfg.Tiers
}

// listening is told the addresses once the server accepts calls (tests);
// metricsAddr is "off" and httpAddr "" when not served.
type listening func(grpcAddr, metricsAddr, httpAddr string)

// run serves until ctx is done, then stops gracefully.
func run(ctx context.Context, getenv func(string) string, logw io.Writer, ready listening) (err error) {
	st, err := readSettings(getenv)
	if err != nil {
		return err
	}
	log := newLogger(st, logw)
	for _, n := range st.notes {
		log.Warn(n)
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	var client redis.UniversalClient
	var where string
	if st.redisRef != nil {
		client, where, err = st.redisRef.open()
	} else {
		client, where, err = openRedis(getenv("REDIS_URL"), log)
	}
	if err != nil {
		return err
	}
	closers = append(closers, func() { _ = client.Close() })

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	closers = append(closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = mp.Shutdown(sctx)
	})

	opts := []config.OpenOption{
		config.WithRedisClient(client),
		config.WithLogger(log),
		// every replica's gateway slots are one group: a negative hit
		// frees one of them wherever its hit was (docs/envoy.md)
		config.WithLimiterOptions(append(st.limiterOptions(mp), core.WithSlotGroup(slotGroup))...),
	}
	if u := getenv("DATABASE_URL"); u != "" {
		store, closeDB, err := openOverrides(ctx, u, log)
		if err != nil {
			return err
		}
		closers = append(closers, closeDB)
		opts = append(opts, config.WithResolverOptions(quota.WithOverrides(store)))
	}
	rulesPath, srvOpts, err := rulesEnv(getenv, st)
	if err != nil {
		return err
	}
	hold, err := slotHold(getenv)
	if err != nil {
		return err
	}
	srvOpts = append(srvOpts, rls.WithSlotHold(hold))
	// With RLS_CONFIG the rules are built over the tiers (for the services'
	// classes) and given to the server alone: it passes the limiter the
	// buckets of the rules it matched with each check, and the limiter
	// resolves the services' classes through the tiers.
	var rules *rls.Rules
	var rulesErr error
	opts = append(opts, config.WithLimiterResolver(func(tiers *quota.TieredResolver) (quota.Resolver, error) {
		if st.xds { // no rules until the first push
			rules, rulesErr = rls.NewRules(nil, tiers)
		} else {
			rules, rulesErr = openRules(rulesPath, tiers, getenv, st, log)
		}
		return tiers, rulesErr
	}))
	// The one setup path: the tier file (or the built-in one) builds the
	// resolver and the limiter, and TOLLGATE_CONFIG is watched.
	var svc *config.Service
	path := getenv("TOLLGATE_CONFIG")
	if path != "" {
		svc, err = config.Open(ctx, path, append(opts, config.WithWatch(config.WithSignals(syscall.SIGHUP)))...)
	} else {
		var builtin *config.Config
		if builtin, err = builtinConfig(); err == nil {
			svc, err = config.OpenConfig(ctx, builtin, opts...)
		}
	}
	switch {
	case err != nil && rulesErr != nil:
		return rulesErr
	case err != nil && errors.Is(err, core.ErrInvalidConfig):
		return fmt.Errorf("TOLLGATE_CONFIG: %w", err)
	case err != nil: // Redis does not answer
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	closers = append(closers, func() { _ = svc.Close() })
	lim, style := svc.Limiter, svc.Config.HeaderStyle
	if rules != nil && st.xds {
		xs := *st.xdsClient
		xs.mergeDomains = st.mergeDomains
		if err := watchRulesXDS(ctx, xs, rules, st.forceStart, &closers, log); err != nil {
			return err
		}
		srvOpts = append(srvOpts, rls.WithRules(rules))
	} else if rules != nil {
		wctx, cancel := context.WithCancel(context.Background())
		done := rules.Watch(wctx, rulesPath, time.Second, log, rls.MergeDomains(st.mergeDomains))
		closers = append(closers, func() { cancel(); <-done })
		srvOpts = append(srvOpts, rls.WithRules(rules))
	} else {
		srvOpts = append(srvOpts, rls.WithTiers(svc.Resolver))
	}

	if st.limitHeaders {
		srvOpts = append(srvOpts, rls.WithLimitHeaders(st.limitHdr, st.remainingHdr, st.resetHdr))
	}
	srv, err := rls.New(lim, append([]rls.Option{rls.WithHeaderStyle(style)}, srvOpts...)...)
	if err != nil {
		return err
	}
	gopts, err := st.grpcOptions(log)
	if err != nil {
		return err
	}
	qs, err := quotaService(lim, client, getenv, log)
	if err != nil {
		return err
	}
	g := grpc.NewServer(gopts...)
	rlsv3.RegisterRateLimitServiceServer(g, srv)
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, qs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(g)

	health := &healthCheck{}
	if st.healthyWithConfig && rules != nil {
		health.rules = rules
	}
	if st.reference {
		// the reference's gRPC health service name follows /healthcheck's
		// rule, looked at every second
		health.follow(hs, "ratelimit")
		wctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
					health.follow(hs, "ratelimit")
				}
			}
		}()
		closers = append(closers, func() { cancel(); <-done })
	}
	ln, err := net.Listen(st.grpcNetwork, st.grpcAddr)
	if err != nil {
		return fmt.Errorf("%s: %w", st.grpcAddrName(getenv), err)
	}
	errc := make(chan error, 3)
	go func() { errc <- g.Serve(ln) }()

	// /metrics (and /healthcheck) on the metrics listener, /healthcheck on
	// the reference's HOST:PORT
	var https []*http.Server
	maddr, haddr := st.metricsAddr, ""
	for _, l := range []struct {
		addr, name string
		metrics    bool
		bound      *string
	}{{st.metricsAddr, st.metricsAddrName(getenv), true, &maddr}, {st.httpAddr, "HOST, PORT", false, &haddr}} {
		if l.addr == "" || l.addr == "off" {
			continue
		}
		hln, err := net.Listen("tcp", l.addr)
		if err != nil {
			g.Stop()
			<-errc
			for _, h := range https {
				_ = h.Close()
			}
			return fmt.Errorf("%s: %w", l.name, err)
		}
		mux := http.NewServeMux()
		if l.metrics {
			mux.Handle("GET "+st.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		}
		mux.Handle("GET /healthcheck", health)
		if !l.metrics {
			mux.Handle("/json", jsonHandler(srv))
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		https = append(https, hs)
		go func() {
			if err := hs.Serve(hln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", l.name, err)
			}
		}()
		*l.bound = hln.Addr().String()
	}
	log.Info("tollgate-rls listening", "addr", ln.Addr().String(), "tls", st.useTLS, "metrics", maddr, "healthcheck", haddr, "redis", where, "config", orBuiltin(path), "rules", orNone(rulesPath))
	if ready != nil {
		ready(ln.Addr().String(), maddr, haddr)
	}

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("tollgate-rls shutting down")
	}
	hs.Shutdown() // NOT_SERVING: balancers and Envoy's health checks move off
	health.stopping.Store(true)
	qs.Close() // quota streams end, refunding their reservations; GracefulStop would wait on them
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(shutdownTimeout):
		g.Stop()
		<-stopped
	}
	for _, h := range https {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		_ = h.Shutdown(sctx)
		cancel()
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// rulesEnv reads where the envoyproxy/ratelimit configuration is
// (RLS_CONFIG, else the reference's
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY; "" when neither is
// set) and the options that go with it. A descriptor's limit override
// applies with a configuration, as in the reference, unless
// RLS_DESCRIPTOR_LIMITS=false.
func rulesEnv(getenv func(string) string, st *settings) (string, []rls.Option, error) {
	path := cmp.Or(getenv("RLS_CONFIG"), st.rulesPath)
	if st.xds {
		if getenv("RLS_CONFIG") != "" {
			return "", nil, fmt.Errorf("RLS_CONFIG and CONFIG_TYPE=GRPC_XDS_SOTW: the configuration comes from one of them; unset one")
		}
		path = "" // the reference reads no file with xDS
	}
	configured := path != "" || st.xds
	var opts []rls.Option
	if configured && getenv("RLS_DESCRIPTOR_LIMITS") == "" {
		opts = append(opts, rls.WithDescriptorLimits(true))
	}
	for _, o := range []struct {
		env string
		opt func(bool) rls.Option
	}{{"SHADOW_MODE", rls.WithGlobalShadow}, {"RLS_DESCRIPTOR_LIMITS", rls.WithDescriptorLimits}, {"RLS_TRUST_TIER", rls.WithTrustedTier}} {
		v := getenv(o.env)
		if v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return "", nil, fmt.Errorf("%s: want true or false, got %q", o.env, v)
		}
		if trust := o.env == "RLS_TRUST_TIER"; on && trust && configured {
			return "", nil, fmt.Errorf("RLS_TRUST_TIER is for descriptors without RLS_CONFIG (a rule names its trusted tier entry)")
		} else if on && !trust && !configured {
			return "", nil, fmt.Errorf("%s needs RLS_CONFIG (an envoyproxy/ratelimit configuration)", o.env)
		}
		opts = append(opts, o.opt(on))
	}
	for _, o := range []struct {
		env string
		on  bool
		opt func(bool) rls.Option
	}{{"QUOTA_MODE", st.quotaMode, rls.WithGlobalQuota}, {"RESPONSE_DYNAMIC_METADATA", st.dynamicMetadata, rls.WithDynamicMetadata}} {
		if !o.on {
			continue
		}
		if !configured {
			return "", nil, fmt.Errorf("%s needs RLS_CONFIG (an envoyproxy/ratelimit configuration)", o.env)
		}
		opts = append(opts, o.opt(true))
	}
	return path, opts, nil
}

// openRules loads the envoyproxy/ratelimit configuration at path, if any.
// A path that does not exist yet starts with no rules, loaded when it
// appears, when it is the reference's RUNTIME_* directory (the reference
// starts with an empty configuration there) or with
// FORCE_START_WITHOUT_INITIAL_CONFIG; an RLS_CONFIG that does not exist
// stops the start.
func openRules(path string, tiers *quota.TieredResolver, getenv func(string) string, st *settings, log *slog.Logger) (*rls.Rules, error) {
	if path == "" {
		return nil, nil
	}
	name := "RLS_CONFIG"
	if getenv("RLS_CONFIG") == "" {
		name = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && (st.forceStart || name != "RLS_CONFIG") {
		log.Warn("no rate limit configuration yet: every descriptor is answered OK until one appears", "path", path, "from", name)
		return rls.NewRules(nil, tiers)
	}
	cfg, err := rls.LoadConfig(path, rls.MergeDomains(st.mergeDomains))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rls.NewRules(cfg, tiers)
}

func orNone(path string) string {
	if path == "" {
		return "none (descriptors name tenant, tier, class)"
	}
	return path + " (envoyproxy/ratelimit configuration, reloaded on change)"
}

func orBuiltin(path string) string {
	if path == "" {
		return "built-in tiers"
	}
	return path + " (reloaded on change and SIGHUP)"
}

// openRedis returns a client of REDIS_URL (one server, a Cluster or a
// Sentinel's master: config.NewRedisClient), or of an embedded
// Redis-compatible server when it is empty, and says which.
func openRedis(u string, log *slog.Logger) (redis.UniversalClient, string, error) {
	if u == "" {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, "", fmt.Errorf("embedded Redis-compatible server: %w", err)
		}
		log.Warn("REDIS_URL is not set: using an embedded in-process Redis-compatible server; it shares no buckets with any service")
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		return closeBoth{c, m}, "embedded (miniredis at " + m.Addr() + ")", nil
	}
	c, err := config.NewRedisClient(u)
	if err != nil {
		return nil, "", fmt.Errorf("REDIS_URL: %w", err)
	}
	return c, config.RedactURL(u), nil
}

// closeBoth closes the embedded server with its client.
type closeBoth struct {
	*redis.Client
	m *miniredis.Miniredis
}

func (c closeBoth) Close() error {
	err := c.Client.Close()
	c.m.Close()
	return err
}

// openOverrides opens the services' override table in PostgreSQL.
func openOverrides(ctx context.Context, u string, log *slog.Logger) (*sqlquota.Store, func(), error) {
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		scheme, _, _ := strings.Cut(u, ":")
		return nil, nil, fmt.Errorf("DATABASE_URL: unsupported scheme %q (want postgres://...)", scheme)
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	s, err := sqlquota.New(db, sqlquota.Postgres, sqlquota.WithLogger(log))
	if err == nil {
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.Migrate(mctx)
		cancel()
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return s, func() { _ = db.Close() }, nil
}

// slotGroup marks the concurrency slots tollgate-rls takes (core.WithSlotGroup).
const slotGroup = "tollgate-rls"

// defaultSlotHold is how long a hit's concurrency slot is held at most
// without its negative hit (TOLLGATE_SLOT_MAX_HOLD).
const defaultSlotHold = time.Minute

// slotHold reads TOLLGATE_SLOT_MAX_HOLD: the longest a hit's concurrency
// slot is held without its negative hit (rls.WithSlotHold), a Go duration
// above 0 and at most rls.MaxSlotHold; "0" frees a hit's slot at once.
func slotHold(getenv func(string) string) (time.Duration, error) {
	v := getenv("TOLLGATE_SLOT_MAX_HOLD")
	if v == "" {
		return defaultSlotHold, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > rls.MaxSlotHold {
		return 0, fmt.Errorf("TOLLGATE_SLOT_MAX_HOLD: want a duration from 0 to %v (as 90s), got %q", rls.MaxSlotHold, v)
	}
	return d, nil
}

// newLogger is the command's logger: text (or with LOG_FORMAT=json, JSON)
// at LOG_LEVEL's level.
func newLogger(st *settings, w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: st.logLevel}
	if st.logJSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// healthCheck answers /healthcheck as the reference: 200 "OK" while
// serving, 500 once shutting down or, with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED (rules set), while the loaded
// configuration has no domain.
type healthCheck struct {
	stopping atomic.Bool
	rules    *rls.Rules
}

// ok reports whether the service is healthy.
func (h *healthCheck) ok() bool {
	return !h.stopping.Load() && (h.rules == nil || len(h.rules.Domains()) > 0)
}

// follow sets service's gRPC health status as ok says.
func (h *healthCheck) follow(hs *health.Server, service string) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus(service, st)
}

func (h *healthCheck) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !h.ok() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("OK"))
}

// maxJSONBody bounds a /json request's body.
const maxJSONBody = 1 << 20

// jsonHandler answers ShouldRateLimit over HTTP on the reference's
// HOST:PORT, as its /json: a RateLimitRequest in protojson in, the
// RateLimitResponse out, 429 when it is OVER_LIMIT; 400 for a body that is
// not a request (or is over 1 MiB) and for a request the service refuses.
func jsonHandler(srv rlsv3.RateLimitServiceServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req rlsv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		var res *rlsv3.RateLimitResponse
		if err == nil {
			res, err = srv.ShouldRateLimit(r.Context(), &req)
		}
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(res)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch res.GetOverallCode() {
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
