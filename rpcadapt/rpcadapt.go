// Package rpcadapt holds what tollgate's RPC adapters (grpclimit over
// grpc-go, connectlimit over Connect) share, so that both answer alike and
// each rule is said once: the configuration their options set and
// validate, the answer to a verdict that does not proceed (its code,
// message, error details and metadata), and the reading of a throttled
// answer's retry hint on a client. It names no RPC framework: an adapter
// turns an Answer into its framework's error, and its framework's error
// into Hint's arguments. Every rule of the limit itself is in core's Gate.
package rpcadapt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Code is an RPC status code type: grpc-go's codes.Code or Connect's
// connect.Code, which number the codes alike.
type Code interface {
	~uint32
	String() string
}

// The status codes an answer uses, in the numbering both frameworks share.
const (
	codeCanceled          = 1
	codeInvalidArgument   = 3
	codeDeadlineExceeded  = 4
	codeResourceExhausted = 8
	codeInternal          = 13
	codeUnavailable       = 14
	codeUnauthenticated   = 16
)

// PushbackKey is the gRFC A6 metadata a denial or a shed check carries:
// the retry delay in whole milliseconds, rounded up, or -1 ("do not
// retry") when the cost can never be met. grpc-go clients with a retry
// policy honour it. (The Retry-After of an over-limit denial is among the
// rate-limit headers.)
const PushbackKey = "grpc-retry-pushback-ms"

// defaultDomain is the ErrorInfo domain of a denial unless an option sets
// another.
const defaultDomain = "tollgate.dev"

// ErrorInfo of a denial (the adapters' package documentation lists them).
const (
	// errorReason is the ErrorInfo reason of every denial.
	errorReason = "RATE_LIMIT_EXCEEDED"
	// ErrorInfo metadata keys: the binding policy (bucket), its capacity,
	// the tokens left (rounded down), the call's cost, and the core reason
	// ("over_limit", or "cost_exceeds_capacity" when it can never be met).
	metaPolicy    = "policy"
	metaLimit     = "limit"
	metaRemaining = "remaining"
	metaCost      = "cost"
	metaReason    = "reason"
)

// maxPushbackMillis bounds a pushback (a year) so that it cannot overflow a
// Duration; any such wait is over every sane maximum delay anyway.
const maxPushbackMillis = 365 * 24 * 3600 * 1000

// misconfiguredMessage is the message of every misconfiguration answer
// (Internal): fixed, the cause goes to the error handler only.
var misconfiguredMessage = render.MisconfiguredProblem().Detail

// Config is what an RPC adapter's server options set. Its methods
// validate a value before they set it: each takes the option's qualified
// name ("grpclimit.WithDomain") for its error, which wraps
// core.ErrInvalidConfig.
type Config[C Code] struct {
	// Filters exempt a call unless every one returns true for its method
	// ("/pkg.Service/Method").
	Filters []func(ctx context.Context, method string) bool
	// DeniedCode is the code of a denial: ResourceExhausted or
	// Unavailable.
	DeniedCode C
	// Domain is the ErrorInfo domain of a denial.
	Domain string
	// Message, when set, is the route charged for each message a client
	// or bidi stream receives.
	Message *gate.Route
	// OnError receives the limiter's errors and the cause of a
	// misconfiguration.
	OnError func(ctx context.Context, method string, err error)
}

// newConfig is the configuration no option changed: denials answered
// ResourceExhausted in defaultDomain.
func newConfig[C Code]() Config[C] {
	return Config[C]{DeniedCode: codeResourceExhausted, Domain: defaultDomain}
}

// Configure is the configuration opts set, each applied in order with
// apply (nil ones skipped). An option given a value it cannot use panics,
// naming fn, the adapter's constructor ("grpclimit.UnaryServerInterceptor"):
// a constructor runs where the interceptor is registered, and returns no
// error.
func Configure[C Code, O comparable](fn string, opts []O, apply func(O, *Config[C]) error) Config[C] {
	c := newConfig[C]()
	var none O
	for _, o := range opts {
		if o == none {
			continue
		}
		if err := apply(o, &c); err != nil {
			panic(panicMessage(fn, err))
		}
	}
	return c
}

// badOption is the error of an option given a value it cannot use.
func badOption(option, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", core.ErrInvalidConfig, option, fmt.Sprintf(format, args...))
}

// panicMessage is the panic message of constructor fn ("grpclimit.NewX") given
// an option that failed with err.
func panicMessage(fn string, err error) string {
	return "tollgate: " + fn + ": " + strings.TrimPrefix(err.Error(), "tollgate: ")
}

// AddFilter adds f to Filters; nil is an error.
func (c *Config[C]) AddFilter(option string, f func(ctx context.Context, method string) bool) error {
	if f == nil {
		return badOption(option, "nil function")
	}
	c.Filters = append(c.Filters, f)
	return nil
}

// SetDeniedCode sets DeniedCode: ResourceExhausted or Unavailable, any
// other code is an error.
func (c *Config[C]) SetDeniedCode(option string, code C) error {
	if code != codeResourceExhausted && code != codeUnavailable {
		return badOption(option, "must be %v or %v, got %v", C(codeResourceExhausted), C(codeUnavailable), code)
	}
	c.DeniedCode = code
	return nil
}

// SetDomain sets Domain; "" is an error.
func (c *Config[C]) SetDomain(option, domain string) error {
	if domain == "" {
		return badOption(option, "empty domain")
	}
	c.Domain = domain
	return nil
}

// SetMessageCost sets Message to cost tokens of class; a class or cost the
// route table would refuse is an error.
func (c *Config[C]) SetMessageCost(option, class string, cost int64) error {
	r := gate.Route{Class: class, Cost: cost}
	if err := (gate.Routes{"message cost": r}).Validate(); err != nil {
		return badOption(option, "%s", strings.TrimPrefix(err.Error(), "tollgate: "))
	}
	c.Message = &r
	return nil
}

// SetErrorHandler sets OnError; nil is an error.
func (c *Config[C]) SetErrorHandler(option string, h func(ctx context.Context, method string, err error)) error {
	if h == nil {
		return badOption(option, "nil function")
	}
	c.OnError = h
	return nil
}

// Limited reports whether a call to method is limited: every filter
// returns true for it.
func (c *Config[C]) Limited(ctx context.Context, method string) bool {
	for _, f := range c.Filters {
		if !f(ctx, method) {
			return false
		}
	}
	return true
}

// Answer is the answer to a verdict that does not proceed, or nil when it
// proceeds; either way it first hands v's error, if any, to OnError.
func (c *Config[C]) Answer(ctx context.Context, method string, v gate.Verdict) *Answer[C] {
	if v.Err != nil && c.OnError != nil {
		c.OnError(ctx, method, v.Err)
	}
	if v.Proceed {
		return nil
	}
	a := &Answer[C]{Code: codeInternal, Message: misconfiguredMessage, Metadata: v.Headers}
	d := v.Decision
	switch {
	case v.Unauthenticated:
		a.Code, a.Message = codeUnauthenticated, v.Problem.Detail
	case d.Denied():
		a.Code, a.Message, a.Details = c.DeniedCode, v.Problem.Detail, c.denial(v)
	case d.Reason == core.ReasonFailedClosed:
		a.Code, a.Message = codeUnavailable, v.Problem.Detail
	case d.Reason == core.ReasonOverloaded:
		// shed: retry later, with a hint (RetryInfo and the pushback)
		a.Code, a.Message = codeUnavailable, v.Problem.Detail
		a.Details = []proto.Message{&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(render.PushbackMillis(d)) * time.Millisecond)}}
	case d.Reason == core.ReasonCanceled:
		// the call's own context ended
		a.Code, a.Message, a.Cause = codeCanceled, v.Problem.Detail, v.Err
		if errors.Is(v.Err, context.DeadlineExceeded) {
			a.Code = codeDeadlineExceeded
		}
		if v.Err != nil {
			a.Message = v.Err.Error()
		}
	case d.Reason == core.ReasonInvalid:
		a.Code, a.Message = codeInvalidArgument, v.Problem.Detail
	}
	if d.Denied() || d.Reason == core.ReasonOverloaded {
		a.Metadata = append(a.Metadata[:len(a.Metadata):len(a.Metadata)],
			render.Header{Name: PushbackKey, Value: strconv.FormatInt(render.PushbackMillis(d), 10)})
	}
	return a
}

// denial is the details of a denied call: one ErrorInfo, one QuotaFailure
// and, unless the cost can never be met, one RetryInfo with the exact
// delay.
func (c *Config[C]) denial(v gate.Verdict) []proto.Message {
	d := v.Decision
	details := make([]proto.Message, 0, 3)
	details = append(details, &errdetails.ErrorInfo{
		Reason: errorReason,
		Domain: c.Domain,
		Metadata: map[string]string{
			metaPolicy:    d.Bucket,
			metaLimit:     strconv.FormatInt(d.Limit, 10),
			metaRemaining: strconv.FormatInt(d.Remaining, 10),
			metaCost:      strconv.FormatInt(d.Cost, 10),
			metaReason:    d.Reason.String(),
		},
	})
	if d.Reason == core.ReasonOverLimit || d.Reason == core.ReasonConcurrencyLimit {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	return append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     v.Tenant.Subject(),
		Description: v.Problem.Detail,
	}}})
}

// Answer is how an RPC adapter answers a call or message that does not
// proceed.
type Answer[C Code] struct {
	// Code and Message are the status.
	Code    C
	Message string
	// Cause is the call's own context error when that context ended
	// (Canceled, DeadlineExceeded); nil otherwise.
	Cause error
	// Details are the error details, in order.
	Details []proto.Message
	// Metadata are the rate-limit headers and, for a denial or a shed
	// check, the pushback (PushbackKey), with names as render spells
	// them: a gRPC adapter lower-cases them.
	Metadata []render.Header
}

// Hint reads the retry hint of a client's failed call: its code, the
// values of its PushbackKey metadata and its error details. throttled is
// false unless the code is ResourceExhausted or Unavailable and the answer
// carries a rate-limit hint: a pushback (-1, or any malformed or repeated
// value: never), a RetryInfo (the longer of the two wins), or an ErrorInfo
// saying the cost can never be met. Other ResourceExhausted answers (a
// message over the size limit, a server's own quota) are not throttling
// answers and are not retried.
func Hint[C Code](code C, pushback []string, details []proto.Message) (h retry.Hint, throttled bool) {
	if code != codeResourceExhausted && code != codeUnavailable {
		return retry.Hint{}, false
	}
	if len(pushback) > 0 {
		throttled = true
		ms, err := strconv.ParseInt(pushback[0], 10, 64)
		if len(pushback) > 1 || err != nil || ms < 0 {
			h.Never = true
		} else {
			h.After = time.Duration(min(ms, maxPushbackMillis)) * time.Millisecond
		}
	}
	for _, m := range details {
		switch m := m.(type) {
		case *errdetails.RetryInfo:
			if m.GetRetryDelay() != nil && m.GetRetryDelay().IsValid() {
				throttled = true
				h.After = max(h.After, m.GetRetryDelay().AsDuration())
			}
		case *errdetails.ErrorInfo:
			if m.GetReason() == errorReason && m.GetMetadata()[metaReason] == core.ReasonCostExceedsCapacity.String() {
				throttled, h.Never = true, true
			}
		}
	}
	return h, throttled
}
