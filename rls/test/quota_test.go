package test

import (
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The installed reference (January 2026) predates the quota rule these
// tests hold tollgate to: envoyproxy/ratelimit's src/service/ratelimit.go
// since March 2026 (#1059) answers OVER_LIMIT when a descriptor that is
// not a quota is over its limit, or when every quota is; a quota over its
// limit keeps its OVER_LIMIT status; an unlimited descriptor is neither;
// under QUOTA_MODE every other descriptor is a quota, a rule-less one too.

const quotaRules = `domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: z
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: r
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: n
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: u
    quota_mode: true
    rate_limit: {unlimited: true}
`

func qr(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "q", Descriptors: ds}
}

// answerCodes is an answer as "OVERALL:status,status".
func answerCodes(res *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(res.GetOverallCode().String() + ":")
	for i, st := range res.GetStatuses() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%v/%d", st.GetCode(), st.GetLimitRemaining())
	}
	return b.String()
}

func TestQuotaModeAsTheReference(t *testing.T) {
	c, _, _ := rulesServer(t, quotaRules, nil)
	for i, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{qr(desc("a", "1"), desc("b", "1")), "OK:OK/0,OK/1"},
		// a over, b passes (and is charged): the request passes
		{qr(desc("a", "1"), desc("b", "1")), "OK:OVER_LIMIT/0,OK/0"},
		// every quota over
		{qr(desc("a", "1"), desc("b", "1")), "OVER_LIMIT:OVER_LIMIT/0,OVER_LIMIT/0"},
		// a quota of 0 alone, beside an unlimited quota (neither) and a
		// descriptor without a rule (not a quota without QUOTA_MODE)
		{qr(desc("z", "1"), desc("u", "1"), desc("nothing", "x")), "OVER_LIMIT:OVER_LIMIT/0,OK/4294967295,OK/0"},
		// a rule over its limit decides, whatever the quotas
		{qr(desc("a", "2"), desc("n", "1")), "OVER_LIMIT:OK/0,OVER_LIMIT/0"},
		// one quota over and a rule under: every quota is over
		{qr(desc("a", "2"), desc("r", "1")), "OVER_LIMIT:OVER_LIMIT/0,OK/0"},
	} {
		if got := answerCodes(ask(t, c, tc.req)); got != tc.want {
			t.Errorf("step %d %v: %s, want %s", i, tc.req.GetDescriptors(), got, tc.want)
		}
	}
}

// TestQuotaPassingSpeaksForTheHeaders: a request that passes on one quota
// while another is denied carries the passing one's headers, no
// Retry-After and no body.
func TestQuotaPassingSpeaksForTheHeaders(t *testing.T) {
	c, _, _ := rulesServer(t, quotaRules, nil)
	ask(t, c, qr(desc("a", "hh")))
	res := ask(t, c, qr(desc("a", "hh"), desc("b", "hh")))
	if got := answerCodes(res); got != "OK:OVER_LIMIT/0,OK/1" {
		t.Fatalf("%s, want a denied and b passing", got)
	}
	if h := headerMap(res); h["Retry-After"] != "" || len(res.GetRawBody()) != 0 || h["RateLimit"] == "" {
		t.Errorf("a request passing on a quota: headers %v, body %q; want the passing quota's, no Retry-After, no body", h, res.GetRawBody())
	}
}

func TestGlobalQuotaAsTheReference(t *testing.T) {
	c, _, _ := rulesServer(t, quotaRules, nil, rls.WithGlobalQuota(true))
	for i, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{qr(desc("r", "1")), "OK:OK/0"},
		// r over, a quota under QUOTA_MODE: b passes
		{qr(desc("r", "1"), desc("b", "1")), "OK:OVER_LIMIT/0,OK/1"},
		// a descriptor without a rule is a quota that passes
		{qr(desc("r", "1"), desc("nothing", "x")), "OK:OVER_LIMIT/0,OK/0"},
		// an unlimited one is not a quota
		{qr(desc("r", "1"), desc("u", "x")), "OVER_LIMIT:OVER_LIMIT/0,OK/4294967295"},
		{qr(desc("n", "1"), desc("z", "1")), "OVER_LIMIT:OVER_LIMIT/0,OVER_LIMIT/0"},
	} {
		if got := answerCodes(ask(t, c, tc.req)); got != tc.want {
			t.Errorf("step %d %v: %s, want %s", i, tc.req.GetDescriptors(), got, tc.want)
		}
	}
	if _, err := rls.New(newLimiter(t, redistest.Client(t)), rls.WithGlobalQuota(true)); err == nil {
		t.Fatal("WithGlobalQuota without WithRules was accepted")
	}
}

// TestQuotaHeadersAsTheReference: under LIMIT_RESPONSE_HEADERS_ENABLED a
// quota over its limit is chosen by its remaining count alone, where a
// rule over its limit is chosen whatever came before it.
func TestQuotaHeadersAsTheReference(t *testing.T) {
	c, _, _ := rulesServer(t, quotaRules, nil, rls.WithLimitHeaders("", "", ""))
	ask(t, c, qr(desc("a", "h")))
	res := ask(t, c, qr(desc("n", "1"), desc("a", "h")))
	if got := headerMap(res)[rls.DefaultLimitHeader]; got != "0" {
		t.Errorf("a rule of 0 over, then a quota of 1 over: %s %q, want 0 (the rule's); %v", rls.DefaultLimitHeader, got, res)
	}
}

const metadataRules = `domain: m
descriptors:
  - key: a
    metadata: {team: a, route: {x: 1}, list: [1]}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    metadata: {team: b, route: {y: 2}, extra: b}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: s
    shadow_mode: true
    metadata: {shadow: true}
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: u
    metadata: {unlimited: true}
    rate_limit: {unlimited: true}
`

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

// TestDynamicMetadataAsTheReference: RESPONSE_DYNAMIC_METADATA as the
// reference's ratelimitToMetadata builds it (src/service/ratelimit.go,
// April 2026): the domain, the descriptors, the request's hits_addend
// unless 0, and the passed rules' metadata merged, the first descriptor's
// value kept and structs merged; never an unlimited descriptor's, nor one
// over its limit. The installed reference has no user metadata (see
// TestDifferentialDynamicMetadata for the rest).
func TestDynamicMetadataAsTheReference(t *testing.T) {
	c, _, _ := rulesServer(t, metadataRules, nil, rls.WithDynamicMetadata(true))
	d := desc("a", "1")
	d.HitsAddend = wrapperspb.UInt64(1)
	res := ask(t, c, &rlsv3.RateLimitRequest{Domain: "m", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{d, desc("b", "1"), desc("s", "1"), desc("u", "1")}})
	want := mustValue(t, map[string]any{
		"domain":     "m",
		"hitsAddend": 1,
		"descriptors": []any{
			map[string]any{"entries": []any{"a=1"}, "hitsAddend": 1},
			map[string]any{"entries": []any{"b=1"}},
			map[string]any{"entries": []any{"s=1"}},
			map[string]any{"entries": []any{"u=1"}},
		},
		// a's first, b's merged in; the shadow rule over its limit passed
		"metadata": map[string]any{"team": "a", "route": map[string]any{"x": 1, "y": 2}, "list": []any{1}, "extra": "b", "shadow": true},
	}).GetStructValue()
	if !proto.Equal(res.GetDynamicMetadata(), want) {
		t.Fatalf("dynamic metadata:\n got %v\nwant %v", res.GetDynamicMetadata(), want)
	}

	// a over its limit: b's alone, its own route (the rules' metadata was
	// not changed by the merge)
	res = ask(t, c, &rlsv3.RateLimitRequest{Domain: "m", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "1"), desc("b", "1")}})
	want = mustValue(t, map[string]any{
		"domain":      "m",
		"descriptors": []any{map[string]any{"entries": []any{"a=1"}}, map[string]any{"entries": []any{"b=1"}}},
		"metadata":    map[string]any{"team": "b", "route": map[string]any{"y": 2}, "extra": "b"},
	}).GetStructValue()
	if !proto.Equal(res.GetDynamicMetadata(), want) {
		t.Fatalf("a over its limit:\n got %v\nwant %v", res.GetDynamicMetadata(), want)
	}

	// a limit override as the reference writes it; no metadata passed
	o := &ratelimitv3.RateLimitDescriptor{Entries: desc("k", "v").Entries,
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}}
	res = ask(t, c, &rlsv3.RateLimitRequest{Domain: "m", Descriptors: []*ratelimitv3.RateLimitDescriptor{o}})
	f := res.GetDynamicMetadata().GetFields()
	got := f["descriptors"].GetListValue().GetValues()[0].GetStructValue().GetFields()["limit"].GetStringValue()
	if got != o.GetLimit().String() || f["metadata"] != nil {
		t.Errorf("limit override: %v, want limit %q and no metadata", res.GetDynamicMetadata(), o.GetLimit().String())
	}

	// an invalid request is answered with the domain and descriptors
	bad := desc("a", "1")
	bad.HitsAddend = wrapperspb.UInt64(1 << 40)
	res = ask(t, c, &rlsv3.RateLimitRequest{Domain: "m", Descriptors: []*ratelimitv3.RateLimitDescriptor{bad}})
	if f := res.GetDynamicMetadata().GetFields(); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || f["domain"].GetStringValue() != "m" || f["metadata"] != nil {
		t.Errorf("invalid request: %v", res)
	}

	// off by default
	off, _, _ := rulesServer(t, metadataRules, nil)
	if res := ask(t, off, &rlsv3.RateLimitRequest{Domain: "m", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("b", "2")}}); res.GetDynamicMetadata() != nil {
		t.Errorf("without WithDynamicMetadata: %v", res.GetDynamicMetadata())
	}
	if _, err := rls.New(newLimiter(t, redistest.Client(t)), rls.WithDynamicMetadata(true)); err == nil {
		t.Fatal("WithDynamicMetadata without WithRules was accepted")
	}
}
