package test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The reference implementation the differential test runs, at the version
// whose behaviour docs/envoy.md describes.
const (
	referenceModule  = "github.com/envoyproxy/ratelimit"
	referencePackage = referenceModule + "/src/service_cmd"
	referenceVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// referenceConfig is the configuration both services answer by: the
// reference's README examples (units lengthened to hours where the
// examples say seconds, so that a run never straddles a refill or a window).
const referenceConfig = "../testdata/readme.yaml"

// differences are the answers that differ by design, each with its
// reason; docs/envoy.md lists the same. Steps that show one name it and
// are not compared; every other field of every other answer is.
var differences = map[string]string{
	"reset":    "duration_until_reset, and the reset header's value under LIMIT_RESPONSE_HEADERS_ENABLED: the reference's is the time to the end of the fixed window; a bucket's is the time until it is full again (there is no window). Never compared.",
	"headers":  "response_headers_to_add and raw_body without LIMIT_RESPONSE_HEADERS_ENABLED: tollgate adds the RateLimit headers and, on a denial, the problem+json body its HTTP adapters send; the reference adds none. With it, both add the same three headers (compared but for the reset's value) and no body.",
	"error":    "an empty domain or no descriptors: both answer an error; the reference's gRPC code is Unknown, tollgate's InvalidArgument. Only the error is compared.",
	"denied":   "a denied request is not charged in tollgate (the bucket keeps its tokens), while the reference's counter keeps counting; so after a denial the reference stays over limit for a peek (hits_addend 0) and tollgate reports the tokens left.",
	"twice":    "one descriptor named twice in a request is one bucket charged once in tollgate; the reference increments its counter once per descriptor.",
	"quota":    "quota_mode over its limit: the reference installed (January 2026) answers the descriptor OK and never the request OVER_LIMIT for it; since March 2026 (envoyproxy/ratelimit#1059) it answers the descriptor OVER_LIMIT and the request OVER_LIMIT when every quota of it is over (or a descriptor that is not a quota), as tollgate does.",
	"negative": "is_negative_hits: the installable reference ignores the flag and charges the hits; tollgate refunds them (never above the capacity) and answers OK without a limit.",
	// shown by TestOneTagAllOrNothingWhateverTheCosts and TestMixedCost*:
	// the reference's own files give one tag to one descriptor's entries,
	// so only tollgate's tenant block puts two buckets on one tag; one
	// shared limit (share_threshold) named at two costs shows it here
	"mixedcost": "descriptors of one hash tag are decided in one script call whatever their hits_addend, all or nothing: a request denied by one charges none of the others (the reference charges them); one limit named by descriptors at different costs is charged their sum at once, so every one of them reports what is left after the whole request, where the reference reports each descriptor's count after its own increment.",
}

// referenceBinary returns the reference's service_cmd at referenceVersion:
// one already installed (the cache directory, PATH, GOBIN or GOPATH/bin),
// or installed now with go install into the user cache directory.
func referenceBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tollgate-test", "envoy-ratelimit@"+referenceVersion)
	cands := []string{filepath.Join(dir, "service_cmd")}
	if p, err := exec.LookPath("service_cmd"); err == nil {
		cands = append(cands, p)
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		f := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(f) == 2 {
			if f[0] != "" {
				cands = append(cands, filepath.Join(f[0], "service_cmd"))
			}
			cands = append(cands, filepath.Join(strings.Split(f[1], string(os.PathListSeparator))[0], "bin", "service_cmd"))
		}
	}
	for _, c := range cands {
		if bi, err := buildinfo.ReadFile(c); err == nil && bi.Main.Path == referenceModule && bi.Main.Version == referenceVersion {
			return c
		}
	}
	missing := func(format string, args ...any) string {
		msg := fmt.Sprintf(format, args...)
		if redistest.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg + " (skipped outside CI)")
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", referencePackage+"@"+referenceVersion)
	cmd.Dir = t.TempDir() // outside the workspace
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return missing("the differential test needs envoyproxy/ratelimit: go install %s@%s: %v\n%s", referencePackage, referenceVersion, err, out)
	}
	return cands[0]
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// startReference runs the reference on redisType ("single" or "cluster")
// at redisURL with the configuration file and the settings extra
// ("NAME=value"), and returns a client of it.
func startReference(t *testing.T, redisType, redisURL, config string, extra ...string) rlsv3.RateLimitServiceClient {
	t.Helper()
	bin := referenceBinary(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", filepath.Base(config)), data, 0o600); err != nil {
		t.Fatal(err)
	}
	grpcPort := freePort(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=" + redisType, "REDIS_URL=" + redisURL,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(freePort(t)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(freePort(t)),
	}
	env = append(env, extra...)
	cmd := exec.Command(bin)
	cmd.Env = env
	var out testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	cc, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	c := rlsv3.NewRateLimitServiceClient(cc)
	// ready when it answers; a slow machine gets a minute
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ready", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
		cancel()
		if err == nil {
			return c
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("envoyproxy/ratelimit exited: %v\n%s", werr, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit did not answer within a minute: %v\n%s", err, out.String())
		}
	}
}

// startTollgate serves the same configuration from an rls.Server on c,
// with opts besides the reference's defaults.
func startTollgate(t *testing.T, c redis.UniversalClient, config string, opts ...rls.Option) rlsv3.RateLimitServiceClient {
	t.Helper()
	cfg, err := rls.LoadConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewRules(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(c, rules, core.WithPrefix(redistest.Prefix(t)), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return serve(t, lim, append([]rls.Option{rls.WithRules(rules), rls.WithDescriptorLimits(true)}, opts...)...)
}

// step is one request sent to both services.
type step struct {
	req *rlsv3.RateLimitRequest
	// differs names a documented difference this answer shows: not compared
	differs string
}

func rd(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "readme", Descriptors: ds, HitsAddend: hits}
}

func withHits(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func times(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// sequences are the request sequences, by what they show.
func sequences() map[string][]step {
	one := func(r *rlsv3.RateLimitRequest) []step { return []step{{req: r}} }
	return map[string][]step{
		"unmatched descriptor is OK without a limit": one(rd(0, desc("unknown", "x"))),
		"unknown domain is OK":                       one(&rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number", "1")}}),
		"empty domain is an error":                   {{req: &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number", "1")}}, differs: "error"}},
		"no descriptors is an error":                 {{req: &rlsv3.RateLimitRequest{Domain: "readme"}, differs: "error"}},
		"key-only rule: each value its own limit, then over": append(times(11, step{req: rd(0, desc("remote_address", "50.0.0.1"))}),
			step{req: rd(0, desc("remote_address", "50.0.0.2"))}),
		"value-specific rule wins over key-only": one(rd(0, desc("remote_address", "50.0.0.5"))),
		"placeholder level has no limit":         one(rd(0, desc("message_type", "marketing"))),
		"deeper than the rules has no limit":     one(rd(0, desc("remote_address", "50.0.0.9", "extra", "x"))),
		"unlimited":                              one(rd(0, desc("ldap", "x"))),
		"minute rule":                            one(rd(0, desc("azure", "x"))),
		"nested and key-only, several descriptors": times(6, step{req: rd(0,
			desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))}),
		"shadow_mode rule answers OK over its limit": times(3, step{req: rd(0, desc("service", "auth", "user", "user-a"))}),
		"rule beside the shadow one denies":          times(4, step{req: rd(0, desc("service", "auth", "user", "user-b"))}),
		"replaces": times(2, step{req: rd(0,
			desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))}),
		"replaced alone keeps its limit": one(rd(0, desc("key_1", "value_1", "user", "bkthomps"))),
		"detailed_metric":                one(rd(0, desc("key1", "anything"))),
		"wildcard: each value its own":   append(times(5, step{req: rd(0, desc("path", "value-1"))}), step{req: rd(0, desc("path", "value-2"))}),
		"share_threshold: one limit for every match": append(append(times(5, step{req: rd(0, desc("files", "files/a.pdf"))}),
			times(5, step{req: rd(0, desc("files", "files/b.csv"))})...), step{req: rd(0, desc("files", "files/c.txt"))}),
		"without share_threshold: each match its own": append(times(10, step{req: rd(0, desc("files_no_share", "files_no_share/a.pdf"))}),
			step{req: rd(0, desc("files_no_share", "files_no_share/a.pdf"))}, step{req: rd(0, desc("files_no_share", "files_no_share/b.csv"))}),
		"hits_addend: per descriptor, 0 checks without charging, request-wide, denial reports 0": {
			{req: rd(0, withHits(3, desc("remote_address", "9.9.9.9")))},
			{req: rd(0, withHits(0, desc("remote_address", "9.9.9.9")))},
			{req: rd(4, desc("remote_address", "9.9.9.9"))},
			{req: rd(0, withHits(5, desc("remote_address", "9.9.9.9")))},
			{req: rd(0, withHits(0, desc("remote_address", "9.9.9.9"))), differs: "denied"},
		},
		"hits_addend: two costs on one shared limit": {
			{req: rd(0, withHits(2, desc("files", "files/x")), withHits(3, desc("files", "files/y"))), differs: "mixedcost"},
		},
		"one descriptor twice": {{req: rd(0, desc("remote_address", "8.8.8.8"), desc("remote_address", "8.8.8.8")), differs: "twice"}},
		"is_negative_hits":     {{req: rd(0, &ratelimitv3.RateLimitDescriptor{Entries: desc("remote_address", "6.6.6.6").Entries, IsNegativeHits: true}), differs: "negative"}},
		// plan has 2 an hour, seat 3: the steps past 2 show "quota"
		"quota_mode: the request over only when every quota is": append(times(2, step{req: rd(0, desc("plan", "p1"), desc("seat", "s1"))}),
			times(2, step{req: rd(0, desc("plan", "p1"), desc("seat", "s1")), differs: "quota"})...),
		"quota_mode beside a rule: over when the one quota is, the rule under": append(times(2, step{req: rd(0, desc("plan", "p2"), desc("remote_address", "5.5.5.5"))}),
			step{req: rd(0, desc("plan", "p2"), desc("remote_address", "5.5.5.5")), differs: "quota"}),
		"quota_mode beside a rule over its limit: over": one(rd(0, desc("plan", "p4"), desc("remote_address", "50.0.0.5"))),
		"quota_mode alone: over when its one quota is": append(times(2, step{req: rd(0, desc("plan", "p3"))}),
			step{req: rd(0, desc("plan", "p3")), differs: "quota"}),
		"descriptor limit override": times(4, step{req: rd(0, &ratelimitv3.RateLimitDescriptor{
			Entries: desc("remote_address", "7.7.7.7").Entries,
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR},
		})}),
	}
}

// compare returns how two answers differ, field by field, outside the
// documented differences ("reset", "headers", "error"). With names (the
// limit, remaining and reset header names, LIMIT_RESPONSE_HEADERS_ENABLED)
// the headers are compared too, the reset's value only as a whole number
// of seconds.
func compare(ref, tg *rlsv3.RateLimitResponse, refErr, tgErr error, names []string) []string {
	if (refErr != nil) != (tgErr != nil) {
		return []string{fmt.Sprintf("error: reference %v, tollgate %v", refErr, tgErr)}
	}
	if refErr != nil {
		return nil
	}
	var diffs []string
	if ref.GetOverallCode() != tg.GetOverallCode() {
		diffs = append(diffs, fmt.Sprintf("overall_code: reference %v, tollgate %v", ref.GetOverallCode(), tg.GetOverallCode()))
	}
	if len(ref.GetStatuses()) != len(tg.GetStatuses()) {
		return append(diffs, fmt.Sprintf("statuses: reference %d, tollgate %d", len(ref.GetStatuses()), len(tg.GetStatuses())))
	}
	for i, r := range ref.GetStatuses() {
		g := tg.GetStatuses()[i]
		if r.GetCode() != g.GetCode() {
			diffs = append(diffs, fmt.Sprintf("statuses[%d].code: reference %v, tollgate %v", i, r.GetCode(), g.GetCode()))
		}
		if r.GetLimitRemaining() != g.GetLimitRemaining() {
			diffs = append(diffs, fmt.Sprintf("statuses[%d].limit_remaining: reference %d, tollgate %d", i, r.GetLimitRemaining(), g.GetLimitRemaining()))
		}
		rl, gl := r.GetCurrentLimit(), g.GetCurrentLimit()
		if (rl == nil) != (gl == nil) || rl.GetRequestsPerUnit() != gl.GetRequestsPerUnit() || rl.GetUnit() != gl.GetUnit() || rl.GetName() != gl.GetName() {
			diffs = append(diffs, fmt.Sprintf("statuses[%d].current_limit: reference %v, tollgate %v", i, rl, gl))
		}
	}
	if names != nil {
		diffs = append(diffs, compareHeaders(ref, tg, names)...)
	}
	if d := compareMetadata(ref.GetDynamicMetadata(), tg.GetDynamicMetadata()); d != "" {
		diffs = append(diffs, d)
	}
	return diffs
}

// compareMetadata compares the dynamic metadata of two answers
// (RESPONSE_DYNAMIC_METADATA), "" when alike: every field but the pinned
// reference's quotaModeEnabled and quotaModeViolations, which the
// reference dropped in March 2026 (envoyproxy/ratelimit#1059) and tollgate
// never sent; a limit override's text with its spaces collapsed (protobuf's
// text output varies them from one binary to another).
func compareMetadata(ref, tg *structpb.Struct) string {
	norm := func(s *structpb.Struct) *structpb.Struct {
		if s == nil {
			return nil
		}
		s = proto.Clone(s).(*structpb.Struct)
		delete(s.Fields, "quotaModeEnabled")
		delete(s.Fields, "quotaModeViolations")
		for _, d := range s.Fields["descriptors"].GetListValue().GetValues() {
			if l := d.GetStructValue().GetFields()["limit"]; l != nil {
				d.GetStructValue().Fields["limit"] = structpb.NewStringValue(strings.Join(strings.Fields(l.GetStringValue()), " "))
			}
		}
		return s
	}
	if r, g := norm(ref), norm(tg); !proto.Equal(r, g) {
		return fmt.Sprintf("dynamic_metadata: reference %v, tollgate %v", r, g)
	}
	return ""
}

// compareHeaders compares the headers of two answers under
// LIMIT_RESPONSE_HEADERS_ENABLED: the same names in the same order, each
// one of names, the same values but the reset's (a whole number of seconds
// in both), and no body.
func compareHeaders(ref, tg *rlsv3.RateLimitResponse, names []string) []string {
	var diffs []string
	rh, gh := ref.GetResponseHeadersToAdd(), tg.GetResponseHeadersToAdd()
	if len(rh) != len(gh) {
		return []string{fmt.Sprintf("response_headers_to_add: reference %v, tollgate %v", rh, gh)}
	}
	for i, r := range rh {
		g := gh[i]
		switch {
		case r.GetKey() != g.GetKey() || !slices.Contains(names, r.GetKey()):
			diffs = append(diffs, fmt.Sprintf("header %d: reference %q, tollgate %q (want one of %v)", i, r.GetKey(), g.GetKey(), names))
		case r.GetKey() == names[2]:
			_, rerr := strconv.ParseUint(r.GetValue(), 10, 32)
			_, gerr := strconv.ParseUint(g.GetValue(), 10, 32)
			if rerr != nil || gerr != nil {
				diffs = append(diffs, fmt.Sprintf("%s: reference %q, tollgate %q, want whole seconds", r.GetKey(), r.GetValue(), g.GetValue()))
			}
		case r.GetValue() != g.GetValue():
			diffs = append(diffs, fmt.Sprintf("%s: reference %q, tollgate %q", r.GetKey(), r.GetValue(), g.GetValue()))
		}
	}
	if len(tg.GetRawBody()) != 0 {
		diffs = append(diffs, fmt.Sprintf("raw_body: tollgate %q, the reference none", tg.GetRawBody()))
	}
	return diffs
}

// runDifferential sends every sequence to both services and compares.
func runDifferential(t *testing.T, ref, tg rlsv3.RateLimitServiceClient) {
	runDifferentialHeaders(t, ref, tg, nil)
}

// runDifferentialHeaders is runDifferential comparing the headers too,
// named names (see compare); nil compares none.
func runDifferentialHeaders(t *testing.T, ref, tg rlsv3.RateLimitServiceClient, names []string) {
	runDifferentialExcept(t, ref, tg, names, nil)
}

// runDifferentialExcept is runDifferentialHeaders without the sequences
// except names, each with the reason the configuration served cannot hold
// what it tests.
func runDifferentialExcept(t *testing.T, ref, tg rlsv3.RateLimitServiceClient, names []string, except map[string]string) {
	// the reference's windows are calendar hours and days: never straddle one
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 30*time.Second {
		time.Sleep(left + time.Second)
	}
	seqs := sequences()
	// in one order for both services and every run: some sequences share a
	// limit (share_threshold)
	for name, why := range except {
		if seqs[name] == nil {
			t.Fatalf("no differential sequence %q to leave out", name)
		}
		t.Logf("sequence %q left out: %s", name, why)
	}
	for _, name := range slices.Sorted(maps.Keys(seqs)) {
		seq := seqs[name]
		if except[name] != "" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			for i, s := range seq {
				if s.differs != "" && differences[s.differs] == "" {
					t.Fatalf("step %d: difference %q is not documented", i, s.differs)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, rerr := ref.ShouldRateLimit(ctx, s.req)
				g, gerr := tg.ShouldRateLimit(ctx, s.req)
				cancel()
				diffs := compare(r, g, rerr, gerr, names)
				switch {
				case s.differs == "error" && (rerr == nil || gerr == nil):
					t.Errorf("step %d: want an error from both, got %v and %v", i, rerr, gerr)
				case s.differs != "" && s.differs != "error":
					if len(diffs) == 0 {
						t.Errorf("step %d: documented difference %q not shown: both answered %v", i, s.differs, g)
					}
					t.Logf("step %d: %s: %s", i, s.differs, strings.Join(diffs, "; "))
				case len(diffs) > 0:
					t.Errorf("step %d %v:\n  %s\n  reference: %v\n  tollgate:  %v", i, s.req, strings.Join(diffs, "\n  "), r, g)
				}
			}
		})
	}
}

func TestDifferentialStandalone(t *testing.T) {
	refRedis := redistest.NewServer(t)
	tgRedis := redistest.NewServer(t)
	ref := startReference(t, "single", refRedis.Addr(), referenceConfig)
	tg := startTollgate(t, tgRedis.Client(t), referenceConfig)
	runDifferential(t, ref, tg)
}

// TestDifferentialDynamicMetadata runs every sequence with
// RESPONSE_DYNAMIC_METADATA=true: the domain, the descriptors and the
// hits_addend in the answer's dynamic metadata, compared with the rest.
// The pinned reference has no user metadata (April 2026): that part is
// TestDynamicMetadataAsTheReference's.
func TestDifferentialDynamicMetadata(t *testing.T) {
	refRedis := redistest.NewServer(t)
	tgRedis := redistest.NewServer(t)
	ref := startReference(t, "single", refRedis.Addr(), referenceConfig, "RESPONSE_DYNAMIC_METADATA=true")
	tg := startTollgate(t, tgRedis.Client(t), referenceConfig, rls.WithDynamicMetadata(true))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := ref.ShouldRateLimit(ctx, rd(0, desc("remote_address", "1.2.3.4"))); err != nil || res.GetDynamicMetadata() == nil {
		t.Fatalf("the reference sent no dynamic metadata: %v, %v", res, err)
	}
	runDifferential(t, ref, tg)
}

func TestDifferentialCluster(t *testing.T) {
	refCluster := redistest.NewCluster(t, 3, 0)
	ref := startReference(t, "cluster", strings.Join(refCluster.Addrs(), ","), referenceConfig)
	tg := startTollgate(t, redistest.SharedCluster(t), referenceConfig)
	runDifferential(t, ref, tg)
}
