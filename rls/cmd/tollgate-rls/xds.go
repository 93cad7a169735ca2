package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/tollgate-go/tollgate/rls"
	"github.com/tollgate-go/tollgate/rls/internal/rlconfig"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// xdsSettings are envoyproxy/ratelimit's settings for CONFIG_TYPE=GRPC_XDS_SOTW,
// with its names and defaults (src/settings/settings.go).
type xdsSettings struct {
	serverURL string            // CONFIG_GRPC_XDS_SERVER_URL, default localhost:18000
	node      *corev3.Node      // CONFIG_GRPC_XDS_NODE_ID (default "default"), CONFIG_GRPC_XDS_NODE_METADATA
	headers   map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: k1:v1,k2:v2
	tls       *tls.Config       // CONFIG_GRPC_XDS_SERVER_USE_TLS and the TLS files; nil: plaintext
	// a failed connection or stream is retried after a backoff from
	// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (10s) doubling to
	// XDS_CLIENT_BACKOFF_MAX_INTERVAL (60s), each time within
	// XDS_CLIENT_BACKOFF_RANDOM_FACTOR (0.5) of it when
	// XDS_CLIENT_BACKOFF_JITTER (true)
	backoffMin, backoffMax time.Duration
	backoffFactor          float64
	jitter                 bool
	maxMsgSize             int  // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; 0: gRPC's default
	mergeDomains           bool // MERGE_DOMAIN_CONFIG: resources of one domain merged
}

// readByXDS marks the settings xdsSettingsFromEnv reads (with
// CONFIG_TYPE=GRPC_XDS_SOTW; without it they do nothing, as in the
// reference).
func readByXDS(*settings, string) error { return nil }

// xdsSettingsFromEnv reads the xDS settings.
func xdsSettingsFromEnv(getenv func(string) string) (xdsSettings, error) {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	s := xdsSettings{serverURL: or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")}
	s.node = &corev3.Node{Id: or("CONFIG_GRPC_XDS_NODE_ID", "default"), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}}
	// "k1=v1,k2=v2", as the reference splits it
	for _, kv := range strings.Split(getenv("CONFIG_GRPC_XDS_NODE_METADATA"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			s.node.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	if h := getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); h != "" {
		s.headers = map[string]string{}
		for _, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, ":")
			if !ok || k == "" {
				return s, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %q is not name:value", kv)
			}
			s.headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	var err error
	dur := func(name, def string) time.Duration {
		d, e := time.ParseDuration(or(name, def))
		if e != nil || d <= 0 {
			err = errors.Join(err, fmt.Errorf("%s: %q is not a positive duration", name, getenv(name)))
		}
		return d
	}
	s.backoffMin = dur("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s")
	s.backoffMax = dur("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s")
	if err != nil {
		return s, err
	}
	if s.backoffFactor, err = parseFloat(or("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5")); err != nil || s.backoffFactor < 0 || s.backoffFactor > 1 {
		return s, fmt.Errorf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR: %q is not a number from 0 to 1", getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"))
	}
	if s.jitter, err = strconv.ParseBool(or("XDS_CLIENT_BACKOFF_JITTER", "true")); err != nil {
		return s, fmt.Errorf("XDS_CLIENT_BACKOFF_JITTER: %w", err)
	}
	if m := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); m != "" {
		if s.maxMsgSize, err = strconv.Atoi(m); err != nil || s.maxMsgSize < 0 {
			return s, fmt.Errorf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: %q is not a size in bytes", m)
		}
	}
	useTLS, err := strconv.ParseBool(or("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"))
	if err != nil {
		return s, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_USE_TLS: %w", err)
	}
	if useTLS {
		if s.tls, err = xdsTLS(getenv); err != nil {
			return s, err
		}
	}
	return s, nil
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// xdsTLS is the client's TLS: the server verified against
// CONFIG_GRPC_XDS_SERVER_TLS_CACERT (else the system roots), under the name
// CONFIG_GRPC_XDS_SERVER_TLS_SAN when set; a client certificate from
// CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY when set (mTLS, as Envoy Gateway
// deploys it).
func xdsTLS(getenv func(string) string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")}
	if ca := getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %s holds no PEM certificate", ca)
		}
	}
	cert, key := getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	if (cert == "") != (key == "") {
		return nil, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both or neither")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// watchXDS keeps a state-of-the-world subscription to the
// ratelimit.config.ratelimit.v3.RateLimitConfig resources of s's server
// until ctx ends. Each response is one whole configuration (every domain),
// applied all or nothing: it is ACKed when apply takes it, NACKed with the
// reason when it does not parse or apply refuses it, and the configuration
// in force stays. A failed connection or stream is retried after a backoff
// (xdsSettings). The channel is closed when the watch has stopped.
func watchXDS(ctx context.Context, s xdsSettings, apply func(*rls.Config) error, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := s.backoffMin
		for {
			received, err := xdsStream(ctx, s, apply, log)
			if ctx.Err() != nil {
				return
			}
			if received {
				backoff = s.backoffMin
			}
			wait := backoff
			if s.jitter {
				wait = time.Duration(float64(wait) * (1 - s.backoffFactor + 2*s.backoffFactor*rand.Float64()))
			}
			log.Warn("xDS: the configuration stream failed; retrying", "server", s.serverURL, "err", err, "in", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, s.backoffMax)
		}
	}()
	return done
}

// xdsStream runs one stream until it fails; received says whether the
// server sent anything on it.
func xdsStream(ctx context.Context, s xdsSettings, apply func(*rls.Config) error, log *slog.Logger) (received bool, err error) {
	creds := insecure.NewCredentials()
	if s.tls != nil {
		creds = credentials.NewTLS(s.tls)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if s.maxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.maxMsgSize)))
	}
	conn, err := grpc.NewClient(s.serverURL, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(s.headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(s.headers))
	}
	c := sotw.NewADSClient(sctx, s.node, resource.RateLimitConfigType)
	if err := c.InitConnect(conn); err != nil {
		return false, err
	}
	for {
		resp, err := c.Fetch()
		if err != nil {
			return received, err
		}
		received = true
		cfg, err := xdsConfig(resp.Resources, s.mergeDomains)
		if err == nil {
			err = apply(cfg)
		}
		if err != nil {
			log.Error("xDS: configuration refused; the one in force stays", "err", err)
			if err := c.Nack(err.Error()); err != nil {
				return received, err
			}
			continue
		}
		log.Info("xDS: configuration applied", "resources", len(resp.Resources))
		if err := c.Ack(); err != nil {
			return received, err
		}
	}
}

// xdsConfig reads a response's resources into one configuration: each
// RateLimitConfig is turned into the YAML the reference would read from a
// file (as its config.ConfigXdsProtoToYaml does) and read as files are, so
// a pushed configuration is held to the same rules as a file (merge:
// MERGE_DOMAIN_CONFIG, resources of one domain merged as files are).
func xdsConfig(res []*anypb.Any, merge bool) (*rls.Config, error) {
	files := make([]rls.ConfigFile, 0, len(res))
	for _, a := range res {
		var pb rlsconfv3.RateLimitConfig
		if err := a.UnmarshalTo(&pb); err != nil {
			return nil, fmt.Errorf("xDS resource %s: %w", a.GetTypeUrl(), err)
		}
		data, err := yaml.Marshal(xdsRoot(&pb))
		if err != nil {
			return nil, err
		}
		files = append(files, rls.ConfigFile{Name: "xds:" + pb.GetName(), Data: data})
	}
	return rls.ParseConfigs(files, rls.MergeDomains(merge))
}

// xdsRoot is pb as the reference's YAML document, for rls to read as it
// reads a file.
func xdsRoot(pb *rlsconfv3.RateLimitConfig) rlconfig.Root {
	return rlconfig.Root{Domain: pb.GetDomain(), Descriptors: xdsDescriptors(pb.GetDescriptors())}
}

func xdsDescriptors(pb []*rlsconfv3.RateLimitDescriptor) []rlconfig.Descriptor {
	ds := make([]rlconfig.Descriptor, len(pb))
	for i, d := range pb {
		ds[i] = rlconfig.Descriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: xdsDescriptors(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if p := d.GetRateLimit(); p != nil {
			rl := &rlconfig.RateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unit: p.GetUnit().String(),
				Unlimited: p.GetUnlimited(), Name: p.GetName()}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, rlconfig.Replace{Name: r.GetName()})
			}
			ds[i].RateLimit = rl
		}
	}
	return ds
}

// watchRulesXDS keeps rules set to the configuration the xDS server pushes,
// until the service stops (closers). Without forceStart
// (FORCE_START_WITHOUT_INITIAL_CONFIG) it waits for the first push before
// the service starts, as the reference does; with it, every descriptor is
// answered as an unknown domain's until then.
func watchRulesXDS(ctx context.Context, s xdsSettings, rules *rls.Rules, forceStart bool, closers *[]func(), log *slog.Logger) error {
	first := make(chan struct{})
	var once sync.Once
	wctx, cancel := context.WithCancel(context.Background())
	done := watchXDS(wctx, s, func(cfg *rls.Config) error {
		rules.Set(cfg)
		once.Do(func() { close(first) })
		return nil
	}, log)
	*closers = append(*closers, func() { cancel(); <-done })
	if forceStart {
		return nil
	}
	log.Info("xDS: waiting for the first configuration (FORCE_START_WITHOUT_INITIAL_CONFIG=false)", "server", s.serverURL, "node", s.node.GetId())
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("CONFIG_TYPE=GRPC_XDS_SOTW: stopped before the first configuration arrived from %s", s.serverURL)
	}
}
