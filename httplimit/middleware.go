package httplimit

import (
	"net"
	"net/http"
	"strings"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// Middleware returns net/http middleware that rate-limits requests with
// gate, built and validated once with gate.New (routes, cost function,
// header style, anonymous callers). Mount it after the authentication
// middleware, which stores the verified tenant with gate.ContextWithTenant:
// the tenant is read from the request's context, never from a header.
//
// For each request: skip (WithSkipper)? Otherwise find the route template
// (see WithPatternFunc) and the route (WithRouteFunc), ask the gate for a
// Verdict, set its rate-limit headers on the response, and either call next
// or the deny handler. Around a *http.ServeMux, a request the mux answers
// 404 or 405 is charged nothing and gets no headers, and the mux's own
// pattern names the route even when an outer mux mounted it; HEAD, which
// the mux serves with a GET route's handler, is charged as that GET route.
// A catch-all pattern ("/", "GET /") is a route like any other: the
// requests it answers are charged, as the table's "/" entry or the default
// route.
//
// A nil gate, or an option given a value it cannot use, panics here,
// where the limiter is registered, as http.Handle(pattern, nil) does.
func Middleware(g *gate.Gate, opts ...Option) func(http.Handler) http.Handler {
	c := adapt.New("httplimit.Middleware", g, DefaultDenyHandler, opts)
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.Skipped(r) {
				next.ServeHTTP(w, r)
				return
			}
			pattern, unmatched := patternOf(c, r, mux)
			v := c.Decide(r.Context(), r, gate.Endpoint{Method: r.Method, Pattern: pattern, ClientIP: clientIP(r), Unmatched: unmatched})
			adapt.SetHeaders(w.Header(), v.Headers)
			if v.Proceed {
				defer v.Done() // frees a concurrency slot and settles the reported cost, panics included
				if ctx, ok := v.CostContext(r.Context()); ok {
					r = r.WithContext(ctx) // the handler may gate.ReportCost its actual cost
					if c.CostHeader != "" {
						cw := &costWriter{ResponseWriter: w, c: c, r: r}
						defer cw.take() // before Done: a handler that wrote nothing
						w = cw
					}
				}
				next.ServeHTTP(w, r)
				return
			}
			c.Deny(w, r, v)
		})
	}
}

// DefaultDenyHandler writes core's answer: v.Status with the RFC 9457
// problem+json body.
func DefaultDenyHandler(w http.ResponseWriter, _ *http.Request, v gate.Verdict) {
	w.Header().Set("Content-Type", v.ContentType)
	w.WriteHeader(v.Status)
	_, _ = w.Write(v.Body)
}

// patternOf returns the route template of r, and whether no route matched.
// The mux the middleware wraps routes r next: its pattern wins over
// r.Pattern, which an outer mux that mounted this one has set to its own
// (the innermost mux names the route). It has no pattern for a request it
// answers 404 or 405. Without a wrapped mux, r.Pattern is the pattern of
// the mux that routed r to this middleware's handler; empty, the route is
// unknown (not unmatched) and is the default route.
func patternOf(c *config, r *http.Request, mux *http.ServeMux) (pattern string, unmatched bool) {
	if c.PatternFunc != nil {
		return c.PatternFunc(r), false
	}
	if mux != nil {
		_, p := mux.Handler(r)
		return StripMethod(p), p == ""
	}
	return StripMethod(r.Pattern), false
}

// StripMethod returns a ServeMux pattern without its method:
// "GET /v1/items/{id}" becomes "/v1/items/{id}".
func StripMethod(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

func clientIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
