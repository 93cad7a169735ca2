package main

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// QUOTA_MODE and RESPONSE_DYNAMIC_METADATA are honoured as the reference
// reads them (its src/settings/settings.go), no longer refused: under
// QUOTA_MODE a rule of 0 beside a quota with room passes, and the answer
// carries the dynamic metadata; without them, the same request is over
// its limit and carries none.
func TestServeQuotaModeAndDynamicMetadata(t *testing.T) {
	redisAddr := redisProcess(t, "")
	req := &rlsv3.RateLimitRequest{Domain: "readme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}, // 0 per second
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "plan", Value: "q1"}}},                 // a quota of 2 an hour
	}}
	for _, tc := range []struct {
		on       string
		want     rlsv3.RateLimitResponse_Code
		metadata bool
	}{{"true", rlsv3.RateLimitResponse_OK, true}, {"false", rlsv3.RateLimitResponse_OVER_LIMIT, false}} {
		env := map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "RLS_CONFIG": "../../testdata/readme.yaml",
			"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr,
			"QUOTA_MODE": tc.on, "RESPONSE_DYNAMIC_METADATA": tc.on, "HOST": "127.0.0.1", "PORT": "0", "DEBUG_PORT": "0"}
		addr, _ := serve(t, env)
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.GetOverallCode() != tc.want || (res.GetDynamicMetadata() != nil) != tc.metadata ||
			tc.metadata && res.GetDynamicMetadata().GetFields()["domain"].GetStringValue() != "readme" {
			t.Errorf("QUOTA_MODE=RESPONSE_DYNAMIC_METADATA=%s: %v; want %v, dynamic metadata %v", tc.on, res, tc.want, tc.metadata)
		}
	}

	// a bad value names the setting; without a configuration they are refused
	for _, bad := range []map[string]string{
		{"QUOTA_MODE": "yes please"},
		{"RESPONSE_DYNAMIC_METADATA": "often"},
	} {
		if _, err := readSettings(envOf(bad)); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	st, err := readSettings(envOf(map[string]string{"QUOTA_MODE": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	st.rulesPath = ""
	if _, _, err := rulesEnv(envOf(nil), st); err == nil {
		t.Error("QUOTA_MODE=true without a configuration: accepted")
	}
}

// convert names a descriptor's metadata and a wildcard inside a value as
// left out, never converting the wildcard as a literal value.
func TestConvertLeavesOutMetadataAndMiddleWildcards(t *testing.T) {
	in := "domain: edge\ndescriptors:\n  - key: path\n    value: /api/*/v2\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: tier\n    value: pro\n    metadata: {team: a}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	var out, errs strings.Builder
	code := convertMain(nil, strings.NewReader(in), &out, &errs)
	if code != 1 || !strings.Contains(errs.String(), "metadata") || !strings.Contains(errs.String(), "wildcard value") || strings.Contains(out.String(), "/api/") {
		t.Errorf("exit %d, stderr %q, out %q; want 1, both named, no wildcard class", code, errs.String(), out.String())
	}
}
