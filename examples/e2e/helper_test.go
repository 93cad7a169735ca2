package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/httplimit"
)

// helperRole, in a process's environment, makes this test binary a helper
// service instead of running the tests: the examples' own wiring (app.Open
// reads ADDR, REDIS_URL, TOLLGATE_CONFIG, ... as an example does) serving
// POST /v1/complete in a way no example does:
//
//   - "hold": as the examples (httplimit, the gate with cost reports), but
//     the handler reports the body's tokens, prints "reported <tenant> <n>"
//     and then waits for the client to go away (at most holdFor) before it
//     returns: a process to kill between reserve and settle.
//   - "estimate": the route's cost charged and never settled (a gate
//     without core.WithCostReports, so the handler's report is refused):
//     charging the estimate only.
//   - "after": a check of cost 0 before the handler and, once the answer
//     is written, a plain charge of the body's tokens (Limiter.Allow):
//     charging after the response only.
const helperRole = "TOLLGATE_E2E_HELPER"

// holdFor bounds how long a "hold" handler waits.
const holdFor = 2 * time.Minute

func runHelper(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveHelper(ctx, role); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
		return 1
	}
	return 0
}

func serveHelper(ctx context.Context, role string) error {
	a, err := app.Open(ctx, app.FromEnv("e2e-"+role, nil))
	if err != nil {
		return err
	}
	defer a.Close()
	var h http.Handler
	switch role {
	case "hold":
		h = httplimit.Middleware(a.Gate)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := app.ParseTokens(r.Body)
			if err == nil {
				err = core.ReportCost(r.Context(), n)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t, _ := core.TenantFromContext(r.Context())
			fmt.Printf("reported %s %d\n", t.ID, n)
			timer := time.NewTimer(holdFor)
			defer timer.Stop()
			select {
			case <-r.Context().Done():
			case <-timer.C:
			}
		}))
	case "estimate":
		gate, err := core.NewGate(a.Limiter, a.File.GateOptions()...)
		if err != nil {
			return err
		}
		h = httplimit.Middleware(gate)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeAnswer(w)(a.Complete(r.Context(), r.Body))
		}))
	case "after":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t, _ := core.TenantFromContext(r.Context())
			if d, err := a.Limiter.Check(r.Context(), core.Request{Tenant: t, Class: app.ClassLLM}); err != nil || !d.Allowed {
				http.Error(w, "denied", http.StatusTooManyRequests)
				return
			}
			n, err := app.ParseTokens(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			_, _ = a.Limiter.Allow(r.Context(), t, app.ClassLLM, n)
		})
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+app.PathHealth, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	mux.Handle("POST "+app.PathComplete, a.Auth.RequireTenant(h))
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		return err
	}
	return app.ServeHTTP(ctx, ln, mux)
}

func writeAnswer(w http.ResponseWriter) func(status int, contentType string, body []byte) {
	return func(status int, contentType string, body []byte) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}
