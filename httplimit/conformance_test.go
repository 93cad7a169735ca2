package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/httplimit"
)

// auth is the test authentication layer: it "verifies" the suite's
// credential and stores the tenant in the request context.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := conformance.Authenticate(r.Header.Get("Authorization")); ok {
			r = r.WithContext(gate.ContextWithTenant(r.Context(), t))
		}
		next.ServeHTTP(w, r)
	})
}

// mount is where a target puts the middleware.
type mount int

const (
	global   mount = iota // around the whole ServeMux
	perRoute              // around each route's handler
	nested                // around a ServeMux mounted in an outer ServeMux ("/")
	// around the whole ServeMux, the handlers reporting their cost in a
	// response header (WithCostHeader) instead of on their context
	costHeader
)

// target serves the endpoints from a ServeMux, with the middleware where m
// says.
func target(m mount) conformance.Target {
	return conformance.HTTPTarget(func(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
		g, err := gate.New(s.Limiter, s.GateOptions(conformance.HTTPRoutes(s.Routes, nil))...)
		if err != nil {
			return nil, err
		}
		opts := []httplimit.Option{httplimit.WithErrorHandler(func(_ *http.Request, err error) { s.OnError(err) })}
		if m == costHeader {
			opts = append(opts, httplimit.WithCostHeader("Tollgate-Cost"))
		}
		mw := httplimit.Middleware(g, opts...)
		var calls conformance.Counter
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Inc()
			if m == costHeader {
				if n := r.Header.Get(conformance.ActualCostHeader); n != "" {
					w.Header().Set("Tollgate-Cost", n) // the middleware reads and removes it
				}
				return
			}
			if err := conformance.ReportActualCost(r.Context(), r.Header.Get(conformance.ActualCostHeader)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})
		mux := http.NewServeMux()
		for _, e := range conformance.HTTPEndpoints {
			if m == perRoute {
				mux.Handle(e.Method+" "+e.Path, mw(handler))
			} else {
				mux.Handle(e.Method+" "+e.Path, handler)
			}
		}
		switch {
		case s.CatchAll && m == perRoute:
			mux.Handle("/", mw(handler)) // every path no other pattern matches
		case s.CatchAll:
			mux.Handle("/", handler)
		}
		switch m {
		case perRoute:
			return conformance.HandlerInstance(auth(mux), &calls), nil
		case nested:
			// the outer mux routes everything to the inner one and sets
			// r.Pattern to its own "/": the inner mux's pattern must win
			outer := http.NewServeMux()
			outer.Handle("/", mw(mux))
			return conformance.HandlerInstance(auth(outer), &calls), nil
		}
		return conformance.HandlerInstance(auth(mw(mux)), &calls), nil
	})
}

func TestConformance(t *testing.T) {
	t.Run("global", func(t *testing.T) { conformance.Run(t, target(global)) })
	t.Run("per-route", func(t *testing.T) { conformance.Run(t, target(perRoute)) })
	t.Run("nested", func(t *testing.T) { conformance.Run(t, target(nested)) })
	t.Run("cost-header", func(t *testing.T) { conformance.Run(t, target(costHeader)) })
}
