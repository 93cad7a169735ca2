package retry

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Transport is an http.RoundTripper that retries throttled answers as the
// server asks: a 429 or 503 with a Retry-After (delta seconds, or an HTTP
// date) is retried after that long plus upward jitter, within the policy's
// attempts and maximum delay. A 429 without Retry-After means the request
// can never be admitted (its cost exceeds the capacity) and is returned at
// once, as is any other answer.
//
// Only requests that can be sent again are retried: no body, or a body with
// GetBody (http.NewRequest sets it for bytes, strings and bytes.Reader
// bodies). The last answer is returned as it came, throttled or not. A
// request whose context is cancelled during a wait returns the context's
// error.
type Transport struct {
	base   http.RoundTripper
	policy *Policy
}

// NewTransport returns a Transport over base (http.DefaultTransport when
// nil) with a policy built from opts (see [New]).
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, policy: New(opts...)}
}

// Policy returns the transport's retry policy.
func (t *Transport) Policy() *Policy { return t.policy }

// RoundTrip sends req, and again while the answer is throttled and the
// policy allows.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	r := req
	for attempt := 1; ; attempt++ {
		res, err := t.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		h, throttled := HTTPHint(res, time.Now())
		if !throttled || !replayable(req) {
			return res, nil
		}
		d, err := t.policy.Next(ctx, h, attempt)
		if err != nil {
			if ctx.Err() != nil {
				res.Body.Close()
				return nil, ctx.Err()
			}
			return res, nil
		}
		// free the connection before the wait
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if err := t.policy.Wait(ctx, d); err != nil {
			return nil, err
		}
		if r, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = b
	}
	return r, nil
}

// HTTPHint reads the retry hint of an HTTP answer, as of now. throttled is
// false for an answer that is not a throttling one: any status but 429 and
// 503, or a 503 without a valid Retry-After. A 429 without a valid
// Retry-After is a "never" hint.
func HTTPHint(res *http.Response, now time.Time) (h Hint, throttled bool) {
	if res.StatusCode != http.StatusTooManyRequests && res.StatusCode != http.StatusServiceUnavailable {
		return Hint{}, false
	}
	d, ok := ParseRetryAfter(res.Header.Get("Retry-After"), now)
	switch {
	case ok:
		return Hint{After: d}, true
	case res.StatusCode == http.StatusTooManyRequests:
		return Hint{Never: true}, true
	}
	return Hint{}, false
}

// ParseRetryAfter parses a Retry-After value: delta seconds (what tollgate
// sends), or an HTTP date, which is turned into the time left after now
// (0 when past). ok is false for anything else, including a negative or
// absurdly large number.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(maxRetryAfter/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// maxRetryAfter bounds a parsed Retry-After (a century) so that the
// duration cannot overflow.
const maxRetryAfter = 100 * 365 * 24 * time.Hour
