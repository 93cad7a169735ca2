// Package adapt holds the plumbing tollgate's HTTP adapters (httplimit,
// ginlimit, echolimit, echov5limit, fiberlimit, fiberv3limit) share, for
// writing another adapter the same way: the framework-neutral part of the
// configuration, mapped to core gate options in one place, the request's
// decision, and the response helpers. Adapters stay
// thin: every rule is in core; this package only carries options and
// headers to it.
package adapt

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgate-go/tollgate/core"
)

// Config is the framework-neutral part of an adapter's configuration. F is
// the framework's request context type (*gin.Context, echo.Context,
// *echo.Context of Echo v5, *fiber.Ctx, fiber.Ctx of Fiber v3,
// *http.Request).
type Config[F any] struct {
	// Gate holds the core gate options (routes, default route, header
	// style, anonymous, ...) in the order given.
	Gate []core.GateOption
	// CostFunc is the framework-neutral dynamic cost function.
	CostFunc core.CostFunc
	// FrameworkCostFunc is the framework-typed one, consulted first.
	FrameworkCostFunc func(F) (core.Route, bool)
	// OnError is the framework-typed error hook: it gets Verdict.Err, and
	// the configuration error of a misconfigured adapter.
	OnError func(F, error)
	// Skip exempts the requests it returns true for: no check, no headers
	// (an adapter's WithSkipper, or Fiber's Next).
	Skip func(F) bool
}

// SetSkip sets Skip, ignoring nil.
func (c *Config[F]) SetSkip(f func(F) bool) {
	if f != nil {
		c.Skip = f
	}
}

// Skipped reports whether Skip exempts f.
func (c *Config[F]) Skipped(f F) bool { return c.Skip != nil && c.Skip(f) }

// SetCostFunc sets CostFunc, ignoring nil (as adapter options do).
func (c *Config[F]) SetCostFunc(f core.CostFunc) {
	if f != nil {
		c.CostFunc = f
	}
}

// SetFrameworkCostFunc sets FrameworkCostFunc, ignoring nil.
func (c *Config[F]) SetFrameworkCostFunc(f func(F) (core.Route, bool)) {
	if f != nil {
		c.FrameworkCostFunc = f
	}
}

// SetOnError sets OnError, ignoring nil.
func (c *Config[F]) SetOnError(f func(F, error)) {
	if f != nil {
		c.OnError = f
	}
}

// Report passes err to OnError when both are set.
func (c *Config[F]) Report(f F, err error) {
	if err != nil && c.OnError != nil {
		c.OnError(f, err)
	}
}

// A Checker decides an adapter's requests: the gate built from a Config,
// or, when the Config is invalid, its configuration error, answered to
// every request as a verdict that does not proceed (500, the Misconfigured
// problem+json, the error in Verdict.Err) so that a bad configuration never
// panics and never lets traffic through unchecked.
type Checker[F any] struct {
	c             *Config[F]
	gate          *core.Gate
	misconfigured core.Verdict
}

// Checker builds the Checker of c over lim (see NewGate).
func (c *Config[F]) Checker(lim *core.Limiter) *Checker[F] {
	gate, err := c.NewGate(lim)
	if err != nil {
		return &Checker[F]{c: c, misconfigured: core.Verdict{Status: http.StatusInternalServerError,
			ContentType: core.ProblemContentType, Body: Misconfigured.JSON(), Problem: Misconfigured, Err: err}}
	}
	return &Checker[F]{c: c, gate: gate}
}

// Decide asks the gate for the verdict on e in ctx (carrying f for the
// framework-typed cost function, see Context) and reports Verdict.Err to
// OnError: the per-request part every adapter shares, between reading the
// request and writing the verdict.
func (k *Checker[F]) Decide(ctx context.Context, f F, e core.Endpoint) core.Verdict {
	v := k.misconfigured
	if k.gate != nil {
		v = k.gate.Decide(k.c.Context(ctx, f), e)
	}
	k.c.Report(f, v.Err)
	return v
}

// AddGate appends gate options, ignoring nil ones.
func (c *Config[F]) AddGate(opts ...core.GateOption) {
	for _, o := range opts {
		if o != nil {
			c.Gate = append(c.Gate, o)
		}
	}
}

type frameworkKey struct{}

// Context returns the context to pass to Gate.Decide: ctx itself, or, when
// a framework-typed cost function is set, ctx carrying f for it.
func (c *Config[F]) Context(ctx context.Context, f F) context.Context {
	if c.FrameworkCostFunc == nil {
		return ctx
	}
	return context.WithValue(ctx, frameworkKey{}, f)
}

// NewGate builds the core gate over lim: the gate options, then one cost
// function that asks FrameworkCostFunc (with the framework context stored
// by Context), then CostFunc, then falls back to the route table.
func (c *Config[F]) NewGate(lim *core.Limiter) (*core.Gate, error) {
	opts := c.Gate
	if c.FrameworkCostFunc != nil || c.CostFunc != nil {
		typed, neutral := c.FrameworkCostFunc, c.CostFunc
		opts = append(opts[:len(opts):len(opts)], core.WithCostFunc(func(ctx context.Context, t core.Tenant, e core.Endpoint) (core.Route, bool) {
			if typed != nil {
				if f, ok := ctx.Value(frameworkKey{}).(F); ok {
					if r, ok := typed(f); ok {
						return r, true
					}
				}
			}
			if neutral != nil {
				return neutral(ctx, t, e)
			}
			return core.Route{}, false
		}))
	}
	return core.NewGate(lim, opts...)
}

// SetHeaders sets core's headers on h, replacing any earlier values. Names
// are stored canonicalised, as http.Header.Set would, with one allocation
// in all once each name has been seen (see canonical).
func SetHeaders(h http.Header, hs []core.Header) {
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
var Misconfigured = core.Problem{Type: "about:blank", Title: "Internal Server Error",
	Status: http.StatusInternalServerError, Detail: "The rate limiter is misconfigured."}

// Apply applies each non-nil option of opts to c, in order, with apply
// (an adapter's Option.apply), and returns c: every adapter's options
// ignore a nil Option.
func Apply[C any, O comparable](c *C, opts []O, apply func(O, *C)) *C {
	var none O
	for _, o := range opts {
		if o != none {
			apply(o, c)
		}
	}
	return c
}
