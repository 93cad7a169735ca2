package rpcadapt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/core/retry"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// code stands for a framework's code type.
type code uint32

func (c code) String() string { return fmt.Sprintf("code(%d)", uint32(c)) }

func TestOptionsRefuseBadValues(t *testing.T) {
	c := newConfig[code]()
	if c.DeniedCode != codeResourceExhausted || c.Domain != defaultDomain {
		t.Fatalf("newConfig = %+v", c)
	}
	for name, err := range map[string]error{
		"x.WithFilter":       c.AddFilter("x.WithFilter", nil),
		"x.WithDeniedCode":   c.SetDeniedCode("x.WithDeniedCode", codeInternal),
		"x.WithDomain":       c.SetDomain("x.WithDomain", ""),
		"x.WithMessageCost":  c.SetMessageCost("x.WithMessageCost", "upload", 0),
		"x.WithErrorHandler": c.SetErrorHandler("x.WithErrorHandler", nil),
	} {
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), name+": ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c.DeniedCode != codeResourceExhausted || c.Domain != defaultDomain || c.Message != nil || len(c.Filters) != 0 || c.OnError != nil {
		t.Errorf("a refused value was set: %+v", c)
	}
	if err := c.SetDeniedCode("x", codeUnavailable); err != nil || c.DeniedCode != codeUnavailable {
		t.Errorf("SetDeniedCode(Unavailable) = %v, %v", err, c.DeniedCode)
	}
	if err := c.SetMessageCost("x", "upload", 2); err != nil || *c.Message != (gate.Route{Class: "upload", Cost: 2}) {
		t.Errorf("SetMessageCost = %v, %v", err, c.Message)
	}
	got := panicMessage("x.New", c.SetDomain("x.WithDomain", ""))
	if want := "tollgate: x.New: invalid configuration: x.WithDomain: empty domain"; got != want {
		t.Errorf("Panic = %q, want %q", got, want)
	}
}

func TestLimited(t *testing.T) {
	c := newConfig[code]()
	if !c.Limited(context.Background(), "/a.S/M") {
		t.Error("no filter: not limited")
	}
	_ = c.AddFilter("x", func(_ context.Context, m string) bool { return m != "/a.S/Health" })
	_ = c.AddFilter("x", func(_ context.Context, m string) bool { return strings.HasPrefix(m, "/a.") })
	for m, want := range map[string]bool{"/a.S/M": true, "/a.S/Health": false, "/b.S/M": false} {
		if got := c.Limited(context.Background(), m); got != want {
			t.Errorf("Limited(%s) = %v, want %v", m, got, want)
		}
	}
}

func TestAnswer(t *testing.T) {
	headers := []render.Header{{Name: "RateLimit", Value: `"default";r=0;t=1`}}
	tenant := quota.Tenant{ID: "acme"}
	over := core.Decision{Reason: core.ReasonOverLimit, Bucket: "default", Limit: 10, Remaining: 0, Cost: 1, RetryAfter: 1500 * time.Microsecond}
	never := core.Decision{Reason: core.ReasonCostExceedsCapacity, Bucket: "default", Limit: 10, Cost: 20}
	deadline := fmt.Errorf("wrapped: %w", context.DeadlineExceeded)
	cases := []struct {
		name     string
		v        gate.Verdict
		code     code
		message  string
		cause    error
		details  []proto.Message
		pushback string
	}{
		{name: "unauthenticated", v: gate.Verdict{Unauthenticated: true, Problem: render.Problem{Detail: "who"}}, code: codeUnauthenticated, message: "who"},
		{name: "over limit", v: gate.Verdict{Decision: over, Tenant: tenant, Problem: render.Problem{Detail: "over"}}, code: codeUnavailable, message: "over",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: errorReason, Domain: "example.com", Metadata: map[string]string{"policy": "default", "limit": "10", "remaining": "0", "cost": "1", "reason": "over_limit"}},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Microsecond)},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:acme", Description: "over"}}},
			}, pushback: "2"},
		{name: "never", v: gate.Verdict{Decision: never, Tenant: tenant, Problem: render.Problem{Detail: "never"}}, code: codeUnavailable, message: "never",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: errorReason, Domain: "example.com", Metadata: map[string]string{"policy": "default", "limit": "10", "remaining": "0", "cost": "20", "reason": "cost_exceeds_capacity"}},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:acme", Description: "never"}}},
			}, pushback: "-1"},
		{name: "failed closed", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonFailedClosed}, Problem: render.Problem{Detail: "store"}}, code: codeUnavailable, message: "store"},
		{name: "shed", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonOverloaded}, Problem: render.Problem{Detail: "shed"}}, code: codeUnavailable, message: "shed",
			details: []proto.Message{&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}}, pushback: "1000"},
		{name: "canceled", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonCanceled}, Err: context.Canceled}, code: codeCanceled, message: "context canceled", cause: context.Canceled},
		{name: "deadline", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonCanceled}, Err: deadline}, code: codeDeadlineExceeded, message: deadline.Error(), cause: deadline},
		{name: "invalid", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonInvalid}, Problem: render.Problem{Detail: "bad"}}, code: codeInvalidArgument, message: "bad"},
		{name: "unresolved", v: gate.Verdict{Decision: core.Decision{Reason: core.ReasonUnresolved}, Problem: render.Problem{Detail: "no quota for x"}}, code: codeInternal, message: misconfiguredMessage},
	}
	c := newConfig[code]()
	_ = c.SetDeniedCode("x", codeUnavailable)
	_ = c.SetDomain("x", "example.com")
	for _, tc := range cases {
		tc.v.Headers = headers
		a := c.Answer(context.Background(), "/a.S/M", tc.v)
		if a == nil {
			t.Errorf("%s: no answer", tc.name)
			continue
		}
		if a.Code != tc.code || a.Message != tc.message || a.Cause != tc.cause {
			t.Errorf("%s: answer %v %q %v, want %v %q %v", tc.name, a.Code, a.Message, a.Cause, tc.code, tc.message, tc.cause)
		}
		if len(a.Details) != len(tc.details) {
			t.Errorf("%s: details %v, want %v", tc.name, a.Details, tc.details)
		}
		for i := range min(len(a.Details), len(tc.details)) {
			if !proto.Equal(a.Details[i], tc.details[i]) {
				t.Errorf("%s: detail %d = %v, want %v", tc.name, i, a.Details[i], tc.details[i])
			}
		}
		want := headers
		if tc.pushback != "" {
			want = append(append([]render.Header(nil), headers...), render.Header{Name: PushbackKey, Value: tc.pushback})
		}
		if fmt.Sprint(a.Metadata) != fmt.Sprint(want) {
			t.Errorf("%s: metadata %v, want %v", tc.name, a.Metadata, want)
		}
	}
	if len(headers) != 1 {
		t.Errorf("the verdict's headers were changed: %v", headers)
	}
}

func TestAnswerProceedsAndReports(t *testing.T) {
	var got []string
	c := newConfig[code]()
	_ = c.SetErrorHandler("x", func(_ context.Context, m string, err error) { got = append(got, m+": "+err.Error()) })
	if a := c.Answer(context.Background(), "/a.S/M", gate.Verdict{Proceed: true}); a != nil {
		t.Errorf("a verdict that proceeds answered %+v", a)
	}
	if a := c.Answer(context.Background(), "/a.S/M", gate.Verdict{Proceed: true, Err: errors.New("store down")}); a != nil {
		t.Errorf("a failed-open verdict answered %+v", a)
	}
	if len(got) != 1 || got[0] != "/a.S/M: store down" {
		t.Errorf("error handler got %q", got)
	}
}

func TestHint(t *testing.T) {
	never := &errdetails.ErrorInfo{Reason: errorReason, Metadata: map[string]string{"reason": "cost_exceeds_capacity"}}
	other := &errdetails.ErrorInfo{Reason: "SOMETHING_ELSE", Metadata: map[string]string{"reason": "cost_exceeds_capacity"}}
	retryIn := func(d time.Duration) proto.Message { return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)} }
	cases := []struct {
		name      string
		code      code
		pushback  []string
		details   []proto.Message
		want      retry.Hint
		throttled bool
	}{
		{"pushback", codeResourceExhausted, []string{"250"}, nil, retry.Hint{After: 250 * time.Millisecond}, true},
		{"pushback -1", codeResourceExhausted, []string{"-1"}, nil, retry.Hint{Never: true}, true},
		{"malformed pushback", codeResourceExhausted, []string{"soon"}, nil, retry.Hint{Never: true}, true},
		{"repeated pushback", codeResourceExhausted, []string{"1", "2"}, nil, retry.Hint{Never: true}, true},
		{"RetryInfo, exact", codeResourceExhausted, nil, []proto.Message{retryIn(1234567 * time.Microsecond)}, retry.Hint{After: 1234567 * time.Microsecond}, true},
		{"RetryInfo longer than pushback", codeResourceExhausted, []string{"10"}, []proto.Message{retryIn(time.Second)}, retry.Hint{After: time.Second}, true},
		{"cost exceeds capacity", codeResourceExhausted, nil, []proto.Message{never}, retry.Hint{Never: true}, true},
		{"another ErrorInfo", codeResourceExhausted, nil, []proto.Message{other}, retry.Hint{}, false},
		{"Unavailable with pushback", codeUnavailable, []string{"5"}, nil, retry.Hint{After: 5 * time.Millisecond}, true},
		{"no hint", codeResourceExhausted, nil, nil, retry.Hint{}, false},
		{"other code", codeInternal, []string{"5"}, []proto.Message{retryIn(time.Second)}, retry.Hint{}, false},
		{"huge pushback", codeResourceExhausted, []string{"99999999999999"}, nil, retry.Hint{After: 365 * 24 * time.Hour}, true},
	}
	for _, c := range cases {
		h, ok := Hint(c.code, c.pushback, c.details)
		if h != c.want || ok != c.throttled {
			t.Errorf("%s: Hint = %+v, %v; want %+v, %v", c.name, h, ok, c.want, c.throttled)
		}
	}
}

// option stands for an adapter's sealed Option.
type option interface{ apply(*Config[code]) error }

type optionFunc func(*Config[code]) error

func (f optionFunc) apply(c *Config[code]) error { return f(c) }

func TestConfigure(t *testing.T) {
	domain := func(d string) option {
		return optionFunc(func(c *Config[code]) error { return c.SetDomain("x.WithDomain", d) })
	}
	c := Configure("x.New", []option{nil, domain("a.example"), nil, domain("b.example")}, option.apply)
	if c.Domain != "b.example" || c.DeniedCode != codeResourceExhausted {
		t.Errorf("Configure = %+v", c)
	}
	defer func() {
		want := "tollgate: x.New: invalid configuration: x.WithDomain: empty domain"
		if got := recover(); got != want {
			t.Errorf("panic %v, want %q", got, want)
		}
	}()
	Configure("x.New", []option{domain("")}, option.apply)
	t.Error("no panic")
}
