// Package render is the wire form of a limiter's Decision: the rate-limit
// headers in each header style, the HTTP status, the RFC 9457 problem body
// and the gRPC pushback. The gate, the gRPC adapter and the Envoy rate
// limit service render through it, so that every protocol answers alike.
package render

import (
	"encoding/json"
	"fmt"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/bucketmath"
	"github.com/tollgate-go/tollgate/core/quota"
	"math"
	"strconv"
	"strings"
	"time"
)

// HeaderStyle selects which rate-limit header families a response carries. It
// is a bit set; combine styles with |.
type HeaderStyle uint

// Header styles.
const (
	// HeaderIETF emits RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-11 (RFC 9651 structured fields).
	HeaderIETF HeaderStyle = 1 << iota
	// HeaderXRateLimit emits X-RateLimit-Limit, -Remaining and -Reset, the
	// reset in delta seconds.
	HeaderXRateLimit
	// HeaderXRateLimitEpoch emits the X-RateLimit trio with Reset as a Unix
	// time in seconds (GitHub's convention). It replaces HeaderXRateLimit.
	HeaderXRateLimitEpoch
	// HeaderDraft06 emits RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (draft-ietf-httpapi-ratelimit-headers-06).
	HeaderDraft06

	// HeaderNone emits no rate-limit headers (Retry-After is still sent on a
	// 429: it is part of HTTP, not of a style).
	HeaderNone HeaderStyle = 0
	// DefaultHeaderStyle is IETF draft-11 plus X-RateLimit.
	DefaultHeaderStyle = HeaderIETF | HeaderXRateLimit
)

// Validate reports bits of s that name no header style.
func (s HeaderStyle) Validate() error {
	const known = HeaderIETF | HeaderXRateLimit | HeaderXRateLimitEpoch | HeaderDraft06
	if s&^known != 0 {
		return fmt.Errorf("unknown header style bits %#x", uint(s&^known))
	}
	return nil
}

// Header is one response header (or gRPC metadata entry). Names are spelled
// as their specifications spell them (RateLimit-Policy, X-RateLimit-Remaining,
// Retry-After; https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#http lists them all); gRPC adapters lower-case
// them.
type Header struct{ Name, Value string }

// ProblemContentType is the media type of every problem body (RFC 9457).
const (
	ProblemContentType       = "application/problem+json"
	quotaExceededProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"
)

// ceilSeconds rounds a duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// overloadRetrySeconds is the Retry-After of a shed check (core.ReasonOverloaded).
const overloadRetrySeconds = 1

// retryAfterSeconds is the Retry-After value of a denial: max(1,
// ceil(RetryAfter)) in seconds; never 0. It is 0 when the decision is not an
// over-limit denial (nothing to retry, or never).
func retryAfterSeconds(d core.Decision) int64 {
	if d.Reason != core.ReasonOverLimit && d.Reason != core.ReasonConcurrencyLimit {
		return 0
	}
	if s := ceilSeconds(d.RetryAfter); s > 1 {
		return s
	}
	return 1
}

// Headers returns the rate-limit headers of d in style, in a fixed order, for
// an allowed or a denied response alike. now is used only by
// HeaderXRateLimitEpoch. A degraded or invalid decision has no rate-limit
// headers. A denial (core.ReasonOverLimit) adds Retry-After whatever the style;
// a shed check (core.ReasonOverloaded) has Retry-After alone.
func Headers(d core.Decision, style HeaderStyle, now time.Time) []Header {
	if d.Reason == core.ReasonOverloaded {
		// shed: no bucket numbers to report, but a hint when to come back
		return []Header{{"Retry-After", strconv.FormatInt(overloadRetrySeconds, 10)}}
	}
	if !hasQuota(d) {
		return nil
	}
	hs := make([]Header, 0, 6)
	limit := strconv.FormatInt(d.Limit, 10)
	remaining := strconv.FormatInt(d.Remaining, 10)
	reset := ceilSeconds(d.ResetAfter)
	retry := retryAfterSeconds(d)
	t := ceilSeconds(untilGrows(d))
	if d.Reason == core.ReasonOverLimit {
		t = retry
	}
	if style&HeaderIETF != 0 {
		name := quoteSFString(d.Bucket)
		policy := name + ";q=" + limit + ";w=" + strconv.FormatInt(window(d.Quota), 10)
		field := name + ";r=" + remaining + ";t=" + strconv.FormatInt(t, 10)
		if c, ok := concurrent(d); ok {
			// the concurrency limit beside the rate policy, in its own quota
			// unit; t only when it is what denied the request
			cname := quoteSFString(concurrencyPolicy(c.Name))
			policy += ", " + cname + ";q=" + strconv.FormatInt(c.Quota.Concurrency, 10) + `;qu="concurrent-requests"`
			field += ", " + cname + ";r=" + strconv.FormatInt(max(0, c.Quota.Concurrency-c.InFlight), 10)
			if d.Reason == core.ReasonConcurrencyLimit {
				field += ";t=" + strconv.FormatInt(retry, 10)
			}
		}
		hs = append(hs, Header{"RateLimit-Policy", policy}, Header{"RateLimit", field})
	}
	if style&(HeaderXRateLimit|HeaderXRateLimitEpoch) != 0 {
		r := strconv.FormatInt(reset, 10)
		if style&HeaderXRateLimitEpoch != 0 {
			r = strconv.FormatInt(now.Add(d.ResetAfter).Add(time.Second-1).Unix(), 10)
		}
		hs = append(hs,
			Header{"X-RateLimit-Limit", limit},
			Header{"X-RateLimit-Remaining", remaining},
			Header{"X-RateLimit-Reset", r},
		)
	}
	if style&HeaderDraft06 != 0 {
		hs = append(hs,
			Header{"RateLimit-Limit", limit},
			Header{"RateLimit-Remaining", remaining},
			Header{"RateLimit-Reset", strconv.FormatInt(reset, 10)},
		)
	}
	if retry > 0 {
		hs = append(hs, Header{"Retry-After", strconv.FormatInt(retry, 10)})
	}
	return hs
}

// quoteSFString serialises s as an RFC 9651 structured-field string: quoted, with
// '"' and '\' escaped. Bytes a structured-field string cannot hold (controls,
// non-ASCII) are written as %XX, so a name can never inject a header.
func quoteSFString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f || c == '%':
			b.WriteByte('%')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Status is the HTTP status of a response for d: 200 when the request
// proceeds (allowed, failed open, shadow-denied), 429 for a denial, 503 when
// the store failed and the policy is fail-closed, when the check was shed
// (core.ReasonOverloaded) or when the request's own context ended before
// the check (core.ReasonCanceled: the handler must not run; a caller that
// is gone never reads it), 400 for an invalid request, 500 when no quota
// is configured for it.
func Status(d core.Decision) int {
	switch {
	case d.Allowed:
		return 200
	case d.Denied():
		return 429
	case d.Reason == core.ReasonFailedClosed, d.Reason == core.ReasonCanceled, d.Reason == core.ReasonOverloaded:
		return 503
	case d.Reason == core.ReasonUnresolved:
		return 500
	default:
		return 400
	}
}

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// JSON returns the problem serialised, as the response body.
func (p Problem) JSON() []byte {
	b, err := json.Marshal(p)
	if err != nil { // unreachable: the struct holds only strings and ints
		return []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
	}
	return b
}

// ProblemOf returns the RFC 9457 body for a response that does not proceed (a
// denial, a fail-closed answer or an invalid request). It never contains the
// tenant ID.
func ProblemOf(d core.Decision) Problem {
	switch d.Reason {
	case core.ReasonOverLimit:
		return quotaExceeded(d.Bucket, fmt.Sprintf("Rate limit of policy %s exceeded: the request costs %d, %d left; retry in %d s.",
			quoteSFString(d.Bucket), d.Cost, d.Remaining, retryAfterSeconds(d)))
	case core.ReasonConcurrencyLimit:
		c, _ := concurrent(d)
		return quotaExceeded(concurrencyPolicy(d.Bucket), fmt.Sprintf("Concurrency limit of policy %s reached: %d requests in flight, at most %d; retry in %d s.",
			quoteSFString(d.Bucket), c.InFlight, c.Quota.Concurrency, retryAfterSeconds(d)))
	case core.ReasonCostExceedsCapacity:
		return quotaExceeded(d.Bucket, fmt.Sprintf("The request costs %d, more than the capacity %d of policy %s: it can never be admitted.",
			d.Cost, d.Limit, quoteSFString(d.Bucket)))
	case core.ReasonFailedClosed:
		return plainProblem(503, "Service Unavailable", "The rate limiter cannot reach its store; try again later.")
	case core.ReasonCanceled:
		return plainProblem(503, "Service Unavailable", "The request was cancelled or its deadline passed before the rate limit was checked.")
	case core.ReasonOverloaded:
		return plainProblem(503, "Service Unavailable", "The rate limiter is overloaded and could not check this request in time; retry later.")
	case core.ReasonUnresolved:
		return plainProblem(500, "Internal Server Error", "No rate limit is configured for this request.")
	case core.ReasonInvalid:
		return plainProblem(400, "Bad Request", "The request cannot be rate limited: its identity or cost is invalid.")
	}
	return plainProblem(200, "OK", "")
}

// concurrencyPolicy is the name under which bucket's concurrency limit is
// reported: in RateLimit-Policy and RateLimit beside the bucket's rate
// policy, and in a concurrency denial's violated-policies. A bucket name
// holds no '/', so it never names a rate policy.
func concurrencyPolicy(bucket string) string { return bucket + "/concurrency" }

// quotaExceeded is the 429 body of a denial by bucket.
func quotaExceeded(bucket, detail string) Problem {
	return Problem{Type: quotaExceededProblemType, Title: "Too Many Requests", Status: 429, Detail: detail,
		ViolatedPolicies: []string{bucket}}
}

// plainProblem is a body whose status says it all (type about:blank, RFC
// 9457 §4.2.1): title is the status's reason phrase.
func plainProblem(status int, title, detail string) Problem {
	return Problem{Type: "about:blank", Title: title, Status: status, Detail: detail}
}

// MisconfiguredProblem is the body of the 500 answered when the limiter's
// configuration cannot decide a request (an adapter's bad option, a cost
// function's invalid answer). It is fixed: the cause goes to the error
// hook, never to the client. Its Detail is the message of the gRPC
// adapter's Internal answer.
func MisconfiguredProblem() Problem {
	return plainProblem(500, "Internal Server Error", "The rate limiter is misconfigured.")
}

// UnauthenticatedProblem is the body of a 401 answered when a request reaches
// the limiter with no verified tenant in its context.
func UnauthenticatedProblem() Problem {
	return plainProblem(401, "Unauthorized", "The request carries no verified tenant identity.")
}

// hasQuota reports whether d carries bucket numbers to render.
func hasQuota(d core.Decision) bool {
	switch d.Reason {
	case core.ReasonOK, core.ReasonOverLimit, core.ReasonCostExceedsCapacity, core.ReasonShadowDenied, core.ReasonConcurrencyLimit:
		return d.Bucket != ""
	}
	return false
}

// concurrent returns d's bucket with a concurrency limit, if any.
func concurrent(d core.Decision) (core.BucketState, bool) {
	for _, b := range d.Buckets {
		if b.Quota.Concurrency > 0 {
			return b, true
		}
	}
	return core.BucketState{}, false
}

// untilGrows is how long until floor(tokens) grows by one: the RateLimit
// field's t on an admitted request. Zero when the bucket is full.
func untilGrows(d core.Decision) time.Duration {
	if d.Quota.RefillPerSecond <= 0 || d.Tokens >= float64(d.Limit) {
		return 0
	}
	next := math.Floor(d.Tokens) + 1
	if next > float64(d.Limit) {
		next = float64(d.Limit)
	}
	return bucketmath.Duration((next - d.Tokens) / d.Quota.RefillPerSecond)
}

// window is the policy window of q in whole seconds, max(1, ceil(C/rate)),
// as RateLimit-Policy's w parameter reports it.
func window(q quota.Quota) int64 {
	w := math.Ceil(float64(q.Capacity) / q.RefillPerSecond)
	if w < 1 {
		return 1
	}
	return int64(w)
}
