// Command nethttp is the example service on net/http (Go 1.22 ServeMux)
// with tollgate's httplimit middleware. The gin, echo, fiber and grpc
// examples serve the same API, so they can be compared.
//
//	cd examples && TOLLGATE_DEMO=1 go run ./nethttp
//	curl -H "Authorization: Bearer $(go run ./cmd/mint -tenant t42)" localhost:8091/v1/profile
//
// See ../README.md for the environment it reads.
package main

import (
	"encoding/json"
	"net/http"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/httplimit"
)

func main() {
	app.MainHTTP("nethttp", NewHandler)
}

// NewHandler returns the service: /healthz and /metrics open, /v1/ behind
// authentication and then the limiter.
func NewHandler(a *app.App) (http.Handler, error) {
	opts := []httplimit.Option{
		httplimit.WithErrorHandler(func(r *http.Request, err error) {
			a.LimiterError(r.URL.Path, err)
		}),
	}
	limit := httplimit.Middleware(a.Gate, opts...)
	protect := func(h http.HandlerFunc) http.Handler { return a.Auth.RequireTenant(limit(h)) }

	mux := http.NewServeMux()
	mux.Handle("GET "+app.PathHealth, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, app.Health{Status: "ok"})
	}))
	mux.Handle("GET "+app.PathMetrics, a.Metrics)
	mux.Handle("GET "+app.PathProfile, protect(func(w http.ResponseWriter, r *http.Request) {
		t, _ := gate.TenantFromContext(r.Context())
		writeJSON(w, a.GetProfile(t))
	}))
	mux.Handle("GET "+app.PathReports, protect(func(w http.ResponseWriter, r *http.Request) {
		t, _ := gate.TenantFromContext(r.Context())
		writeJSON(w, a.ListReports(r.Context(), t))
	}))
	mux.Handle("POST "+app.PathExport, protect(func(w http.ResponseWriter, r *http.Request) {
		t, _ := gate.TenantFromContext(r.Context())
		writeJSON(w, a.ExportReport(t))
	}))
	mux.Handle("POST "+app.PathComplete, protect(func(w http.ResponseWriter, r *http.Request) {
		status, contentType, body := a.Complete(r.Context(), r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	return mux, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
