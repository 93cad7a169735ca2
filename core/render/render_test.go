package render

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
)

func TestHeaders(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	now := time.Unix(1_700_000_000, 0)
	allowed := newDecision([]core.BucketState{{Name: "default", Quota: q, Tokens: 6.5}}, 0, core.ReasonOK, 0, 1)
	denied := newDecision([]core.BucketState{{Name: "default", Quota: q, Tokens: 0.25}}, 0, core.ReasonOverLimit, 0.375, 1)
	never := newDecision([]core.BucketState{{Name: "export", Quota: q, Tokens: 10}}, 0, core.ReasonCostExceedsCapacity, 0, 11)
	tests := []struct {
		name  string
		d     core.Decision
		style HeaderStyle
		want  string
	}{
		{"allowed default", allowed, DefaultHeaderStyle,
			`RateLimit-Policy: "default";q=10;w=5|RateLimit: "default";r=6;t=1|X-RateLimit-Limit: 10|X-RateLimit-Remaining: 6|X-RateLimit-Reset: 2`},
		{"denied default: Retry-After >= 1 and t equals it", denied, DefaultHeaderStyle,
			`RateLimit-Policy: "default";q=10;w=5|RateLimit: "default";r=0;t=1|X-RateLimit-Limit: 10|X-RateLimit-Remaining: 0|X-RateLimit-Reset: 5|Retry-After: 1`},
		{"never: no Retry-After", never, DefaultHeaderStyle,
			`RateLimit-Policy: "export";q=10;w=5|RateLimit: "export";r=10;t=0|X-RateLimit-Limit: 10|X-RateLimit-Remaining: 10|X-RateLimit-Reset: 0`},
		{"epoch", allowed, HeaderXRateLimitEpoch,
			`X-RateLimit-Limit: 10|X-RateLimit-Remaining: 6|X-RateLimit-Reset: 1700000002`},
		{"draft-06", allowed, HeaderDraft06,
			`RateLimit-Limit: 10|RateLimit-Remaining: 6|RateLimit-Reset: 2`},
		{"none keeps Retry-After", denied, HeaderNone, `Retry-After: 1`},
		{"degraded has none", core.Decision{Reason: core.ReasonFailedOpen, Allowed: true}, DefaultHeaderStyle, ``},
		{"shed: Retry-After alone", core.Decision{Reason: core.ReasonOverloaded, Cost: 1}, DefaultHeaderStyle, `Retry-After: 1`},
		{"shed, style none: Retry-After", core.Decision{Reason: core.ReasonOverloaded, Cost: 1}, HeaderNone, `Retry-After: 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, h := range Headers(tt.d, tt.style, now) {
				parts = append(parts, h.Name+": "+h.Value)
			}
			if got := strings.Join(parts, "|"); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	if Status(denied) != 429 || Status(never) != 429 || Status(allowed) != 200 {
		t.Error("status")
	}
	if PushbackMillis(denied) != 375 || PushbackMillis(never) != -1 || PushbackMillis(allowed) != 0 {
		t.Error("pushback", PushbackMillis(denied), PushbackMillis(never))
	}
}

func TestConcurrencyHeaders(t *testing.T) {
	q := quota.Quota{Capacity: 100, RefillPerSecond: 10, Concurrency: 2}
	now := time.Unix(1_700_000_000, 0)
	allowed := newDecision([]core.BucketState{{Name: "reports", Quota: q, Tokens: 99, InFlight: 1}}, 0, core.ReasonOK, 0, 1)
	denied := newDecision([]core.BucketState{{Name: "reports", Quota: q, Tokens: 98.5, InFlight: 2}}, 0, core.ReasonConcurrencyLimit, 0, 1)
	denied.RetryAfter = 400 * time.Millisecond
	join := func(hs []Header) string {
		var parts []string
		for _, h := range hs {
			parts = append(parts, h.Name+": "+h.Value)
		}
		return strings.Join(parts, "|")
	}
	for _, tt := range []struct {
		name string
		d    core.Decision
		want string
	}{
		{"allowed", allowed, `RateLimit-Policy: "reports";q=100;w=10, "reports/concurrency";q=2;qu="concurrent-requests"|RateLimit: "reports";r=99;t=1, "reports/concurrency";r=1|X-RateLimit-Limit: 100|X-RateLimit-Remaining: 99|X-RateLimit-Reset: 1`},
		{"denied", denied, `RateLimit-Policy: "reports";q=100;w=10, "reports/concurrency";q=2;qu="concurrent-requests"|RateLimit: "reports";r=98;t=1, "reports/concurrency";r=0;t=1|X-RateLimit-Limit: 100|X-RateLimit-Remaining: 98|X-RateLimit-Reset: 1|Retry-After: 1`},
	} {
		if got := join(Headers(tt.d, DefaultHeaderStyle, now)); got != tt.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.name, got, tt.want)
		}
	}
	if Status(denied) != 429 || !denied.Denied() || PushbackMillis(denied) != 400 {
		t.Errorf("denied: status %d, pushback %d", Status(denied), PushbackMillis(denied))
	}
	p := ProblemOf(denied)
	if p.Status != 429 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "reports/concurrency" ||
		!strings.Contains(p.Detail, "Concurrency limit") || !strings.Contains(p.Detail, "2 requests in flight, at most 2") {
		t.Errorf("problem %+v", p)
	}
}

func TestRetryAfterCeil(t *testing.T) {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	for _, tt := range []struct {
		retry float64
		want  int64
	}{{0.000001, 1}, {0.5, 1}, {1, 1}, {1.000001, 2}, {2.5, 3}} {
		d := newDecision([]core.BucketState{{Name: "d", Quota: q}}, 0, core.ReasonOverLimit, tt.retry, 1)
		if got := retryAfterSeconds(d); got != tt.want {
			t.Errorf("retry %vs: Retry-After %d, want %d", tt.retry, got, tt.want)
		}
	}
}

func FuzzQuoteSFString(f *testing.F) {
	for _, s := range []string{"default", `a"b`, `a\b`, "a\r\nX-Evil: 1", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := quoteSFString(s)
		if len(out) < 2 || out[0] != '"' || out[len(out)-1] != '"' {
			t.Fatalf("%q -> %q: not quoted", s, out)
		}
		body := out[1 : len(out)-1]
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("%q -> %q: byte %q is not allowed in an sf-string", s, out, c)
			}
			if c == '\\' || c == '"' {
				if c == '"' {
					t.Fatalf("%q -> %q: unescaped quote", s, out)
				}
				i++ // escaped pair
				if i >= len(body) || (body[i] != '\\' && body[i] != '"') {
					t.Fatalf("%q -> %q: bad escape", s, out)
				}
			}
		}
	})
}

// TestOverloadedAnswer: a shed check is never admitted and never looks like
// a denial or a store failure: 503 with its own body, a one-second hint for
// HTTP and gRPC alike.
func TestOverloadedAnswer(t *testing.T) {
	d := core.Decision{Reason: core.ReasonOverloaded, Cost: 1}
	if d.Allowed || d.Denied() || d.Degraded() || Status(d) != 503 {
		t.Fatalf("allowed %v denied %v degraded %v status %d", d.Allowed, d.Denied(), d.Degraded(), Status(d))
	}
	if p := ProblemOf(d); p.Status != 503 || !strings.Contains(p.Detail, "overloaded") {
		t.Fatalf("problem %+v", p)
	}
	if PushbackMillis(d) != 1000 || d.Reason.String() != "overloaded" {
		t.Fatalf("pushback %d, name %q", PushbackMillis(d), d.Reason)
	}
}

// newDecision builds the Decision the limiter makes from the bucket states
// (core's own constructor, field for field), the binding one at binding.
func newDecision(states []core.BucketState, binding int, reason core.Reason, retry float64, cost int64) core.Decision {
	b := states[binding]
	d := core.Decision{Allowed: reason == core.ReasonOK, Reason: reason, Bucket: b.Name, Quota: b.Quota,
		Limit: b.Quota.Capacity, Tokens: b.Tokens, Cost: cost, Buckets: states}
	if r := math.Floor(b.Tokens); r > 0 {
		d.Remaining = int64(r)
	}
	if reason == core.ReasonOverLimit {
		d.RetryAfter = bucketmath.Duration(retry)
	}
	d.ResetAfter = bucketmath.Duration((float64(b.Quota.Capacity) - b.Tokens) / b.Quota.RefillPerSecond)
	return d
}

// The misconfiguration answer is one fixed body, the same from every
// adapter, naming no cause.
func TestMisconfiguredProblemIsFixed(t *testing.T) {
	const want = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter is misconfigured."}`
	if got := string(MisconfiguredProblem().JSON()); got != want {
		t.Errorf("MisconfiguredProblem().JSON() = %s, want %s", got, want)
	}
}
