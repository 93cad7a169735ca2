// Package adapt holds the plumbing tollgate's HTTP adapters (httplimit,
// ginlimit, echolimit, echov5limit, fiberlimit, fiberv3limit) share, for
// writing another adapter the same way: the framework-neutral part of the
// configuration (the gate and the framework-typed functions), the
// request's decision, and the response helpers. Adapters stay thin: every
// rule is in core's Gate, built and validated once with gate.New; this
// package only carries the request's route to it and its headers back.
package adapt

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
)

// Config is the framework-neutral part of an adapter's configuration: the
// gate, built and validated once by gate.New, and the framework-typed
// functions an adapter's options set. F is the framework's request context
// type (*gin.Context, echo.Context, *echo.Context of Echo v5, *fiber.Ctx,
// fiber.Ctx of Fiber v3, *http.Request); D is the adapter's deny handler
// type.
type Config[F, D any] struct {
	// Gate decides every request; New refuses a nil one.
	Gate *gate.Gate
	// RouteFunc names the request's class and cost from the framework's
	// context (an adapter's WithRouteFunc); ok false leaves it to the gate
	// (its cost function, then its route table).
	RouteFunc func(F) (gate.Route, bool)
	// PatternFunc finds the request's route template, for adapters whose
	// framework cannot always say (an adapter's WithPatternFunc).
	PatternFunc func(F) string
	// OnError is the framework-typed error hook: it gets Verdict.Err,
	// including the configuration error of a misconfigured adapter.
	OnError func(F, error)
	// Skip exempts the requests it returns true for: no check, no headers
	// (an adapter's WithSkipper, or Fiber's Next).
	Skip func(F) bool
	// Deny answers a verdict that does not proceed.
	Deny D
	// CostHeader, when not empty, names the response header a handler may
	// report its actual cost in (an adapter's WithCostHeader): the adapter
	// reads and removes it before the response header is written.
	CostHeader string
}

// Option configures an adapter's Config. It is sealed: the constructors
// below (Skipper to DenyHandler) make every Option. An adapter names its
// instance, type Option = adapt.Option[*gin.Context, denyHandler], and
// exports its options as functions that return one:
// adapt.Skipper[*gin.Context, denyHandler]("ginlimit.WithSkipper", f).
type Option[F, D any] interface{ apply(*Config[F, D]) error }

// optionFunc is the Option the constructors return: a function that sets
// one field of the Config or says why it cannot.
type optionFunc[F, D any] func(*Config[F, D]) error

func (o optionFunc[F, D]) apply(c *Config[F, D]) error { return o(c) }

// New returns the Config of an adapter over g, with deny as the deny
// handler until an option replaces it, and opts applied in order (nil ones
// skipped). fn is the adapter's constructor ("ginlimit.Middleware"). A nil
// gate, or an option given a value it cannot use, panics with a message
// naming fn and the option, as http.Handle(pattern, nil) does: an
// adapter's constructor runs where the limiter is registered, and returns
// no error.
func New[F, D any](fn string, g *gate.Gate, deny D, opts []Option[F, D]) *Config[F, D] {
	if g == nil {
		panic("tollgate: " + fn + ": nil gate")
	}
	c := &Config[F, D]{Gate: g, Deny: deny}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(c); err != nil {
			panic("tollgate: " + fn + ": " + strings.TrimPrefix(err.Error(), "tollgate: "))
		}
	}
	return c
}

// OptionError is the error of option, an adapter's option given a value
// it cannot use: it names the option and wraps core.ErrInvalidConfig.
func OptionError(option, msg string) error {
	return &optionError{option: option, msg: msg}
}

type optionError struct{ option, msg string }

func (e *optionError) Error() string { return "tollgate: " + e.option + ": " + e.msg }
func (e *optionError) Unwrap() error { return core.ErrInvalidConfig }

// The option constructors below (Skipper to DenyHandler) serve every
// adapter: each returns the Option that sets one field of the Config, and
// its error names option, the adapter's option's full name
// ("ginlimit.WithSkipper").

// Skipper sets Config.Skip; nil is an error.
func Skipper[F, D any](option string, f func(F) bool) Option[F, D] {
	return setFunc(option, f, func(c *Config[F, D], f func(F) bool) { c.Skip = f })
}

// RouteFunc sets Config.RouteFunc; nil is an error.
func RouteFunc[F, D any](option string, f func(F) (gate.Route, bool)) Option[F, D] {
	return setFunc(option, f, func(c *Config[F, D], f func(F) (gate.Route, bool)) { c.RouteFunc = f })
}

// PatternFunc sets Config.PatternFunc; nil is an error.
func PatternFunc[F, D any](option string, f func(F) string) Option[F, D] {
	return setFunc(option, f, func(c *Config[F, D], f func(F) string) { c.PatternFunc = f })
}

// ErrorHandler sets Config.OnError; nil is an error.
func ErrorHandler[F, D any](option string, f func(F, error)) Option[F, D] {
	return setFunc(option, f, func(c *Config[F, D], f func(F, error)) { c.OnError = f })
}

// CostHeader sets Config.CostHeader, canonicalized; a name that is not an
// HTTP field name ("" included) is an error.
func CostHeader[F, D any](option string, name string) Option[F, D] {
	return optionFunc[F, D](func(c *Config[F, D]) error {
		if !validHeaderName(name) {
			return OptionError(option, fmt.Sprintf("%q is not an HTTP header name", name))
		}
		c.CostHeader = http.CanonicalHeaderKey(name)
		return nil
	})
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// DenyHandler sets Config.Deny; a nil function is an error.
func DenyHandler[F, D any](option string, d D) Option[F, D] {
	return setFunc(option, d, func(c *Config[F, D], d D) { c.Deny = d })
}

// setFunc returns the Option that stores the function f with set; a nil
// f is the error of option.
func setFunc[F, D, T any](option string, f T, set func(*Config[F, D], T)) Option[F, D] {
	return optionFunc[F, D](func(c *Config[F, D]) error {
		if v := reflect.ValueOf(f); !v.IsValid() || v.Kind() == reflect.Func && v.IsNil() {
			return OptionError(option, "nil function")
		}
		set(c, f)
		return nil
	})
}

// Skipped reports whether Skip exempts f.
func (c *Config[F, D]) Skipped(f F) bool { return c.Skip != nil && c.Skip(f) }

// Pattern returns PatternFunc's answer for f when it is set, else
// framework (the framework's own route template).
func (c *Config[F, D]) Pattern(f F, framework string) string {
	if c.PatternFunc != nil {
		return c.PatternFunc(f)
	}
	return framework
}

// Serve runs one request f through the limiter, with the framework's glue
// given in order of use: skipped (Skip), it goes on with next; otherwise
// endpoint names the request's context and Endpoint (with the framework's
// route template, replaced by PatternFunc's answer when that is set),
// Decide gives the verdict, setHeaders puts its headers on the response,
// and the request either goes on (setContext handing the rest of the chain
// the cost context, then next, with Verdict.Done deferred past it, panics
// included) or is answered by Deny, which must be a func(F, gate.Verdict)
// error or a func(F, gate.Verdict) (or of a named type of either).
func (c *Config[F, D]) Serve(f F, endpoint func(F) (context.Context, gate.Endpoint), setHeaders func(F, []render.Header), setContext func(F, context.Context), next func(F) error) error {
	if c.Skipped(f) {
		return next(f)
	}
	ctx, e := endpoint(f)
	e.Pattern = c.Pattern(f, e.Pattern)
	v := c.Decide(ctx, f, e)
	setHeaders(f, v.Headers)
	if !v.Proceed {
		return c.deny(f, v)
	}
	defer v.Done() // frees a concurrency slot and settles the reported cost
	if cctx, ok := v.CostContext(ctx); ok {
		setContext(f, cctx)
	}
	return next(f)
}

// deny answers v with Deny, a function of type func(F, gate.Verdict) error
// or func(F, gate.Verdict), or of a named type of either.
func (c *Config[F, D]) deny(f F, v gate.Verdict) error {
	switch d := any(c.Deny).(type) {
	case func(F, gate.Verdict) error:
		return d(f, v)
	case func(F, gate.Verdict):
		d(f, v)
		return nil
	}
	out := reflect.ValueOf(c.Deny).Call([]reflect.Value{reflect.ValueOf(&f).Elem(), reflect.ValueOf(v)})
	if len(out) == 1 && !out[0].IsNil() {
		return out[0].Interface().(error)
	}
	return nil
}

// errZeroRoute is the error of a route function that answered ok with the
// zero Route.
var errZeroRoute = fmt.Errorf("%w: route function: ok with the zero Route", core.ErrInvalidConfig)

// Decide asks the gate for the verdict on e in ctx and reports Verdict.Err
// to OnError: the per-request part every adapter shares, between reading
// the request and writing the verdict. RouteFunc, when set and the request
// reaches a handler of the service (gate.Endpoint.Routed: a matched route
// or a catch-all), names e.Route first: the framework's context never
// travels through ctx. With a route function's zero Route, the verdict is the misconfiguration answer: 500 with the fixed
// Misconfigured problem+json body, that does not proceed, the cause in
// Verdict.Err (for the hook and the log, never for the client).
func (c *Config[F, D]) Decide(ctx context.Context, f F, e gate.Endpoint) gate.Verdict {
	var v gate.Verdict
	switch {
	case c.RouteFunc != nil && e.Routed():
		r, ok := c.RouteFunc(f)
		if ok && r == (gate.Route{}) {
			v = MisconfiguredVerdict(errZeroRoute)
			break
		}
		if ok {
			e.Route = r
		}
		v = c.Gate.Decide(ctx, e)
	default:
		v = c.Gate.Decide(ctx, e)
	}
	if v.Err != nil && c.OnError != nil {
		c.OnError(f, v.Err)
	}
	return v
}

// MisconfiguredVerdict is the verdict of a misconfigured adapter: 500,
// the Misconfigured problem+json body, not proceeding, err in Verdict.Err.
func MisconfiguredVerdict(err error) gate.Verdict {
	return gate.Verdict{Status: http.StatusInternalServerError, ContentType: render.ProblemContentType,
		Body: Misconfigured.JSON(), Problem: Misconfigured, Decision: core.Decision{Reason: core.ReasonUnresolved}, Err: err}
}

// SetHeaders sets core's headers on h, replacing any earlier values. Names
// are stored canonicalised, as http.Header.Set would, with one allocation
// in all once each name has been seen (see canonical).
func SetHeaders(h http.Header, hs []render.Header) {
	if len(hs) == 0 {
		return
	}
	vals := make([]string, len(hs))
	for i, hd := range hs {
		vals[i] = hd.Value
		h[canonical(hd.Name)] = vals[i : i+1 : i+1]
	}
}

// canonicalNames caches the canonical form of the header names core emits,
// filled on first sight of each name, so that setting them allocates nothing
// once every name has been seen. Readers load an immutable map; a new name
// is added to a copy under canonicalMu. Core emits a fixed handful of names;
// the cache holds at most maxCanonicalNames, and any name past that is
// canonicalised on every call.
var (
	canonicalNames atomic.Pointer[map[string]string]
	canonicalMu    sync.Mutex
)

// maxCanonicalNames bounds the cache: several times the names core emits.
const maxCanonicalNames = 64

func canonical(name string) string {
	m := canonicalNames.Load()
	if m != nil {
		if c, ok := (*m)[name]; ok {
			return c
		}
	}
	c := http.CanonicalHeaderKey(name)
	if m != nil && len(*m) >= maxCanonicalNames {
		return c
	}
	canonicalMu.Lock()
	defer canonicalMu.Unlock()
	old := map[string]string{}
	if m := canonicalNames.Load(); m != nil {
		old = *m
	}
	if _, ok := old[name]; ok || len(old) >= maxCanonicalNames {
		return c
	}
	next := make(map[string]string, len(old)+1)
	maps.Copy(next, old)
	// a copy of the name: the cache must not keep a caller's larger string alive
	next[strings.Clone(name)] = c
	canonicalNames.Store(&next)
	return c
}

// Misconfigured is the body of the 500 a misconfigured adapter answers
// with (its configuration error goes to the error hook, never to the
// client).
var Misconfigured = render.MisconfiguredProblem()
