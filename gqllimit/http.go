package gqllimit

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/tollgate-go/tollgate/core/render"
)

// httpState is what the operations of one HTTP request leave for Handler
// to write: the rate-limit headers of the check and, for an operation that
// did not run, its status.
type httpState struct {
	mu      sync.Mutex
	headers []render.Header
	status  int
}

type httpKey struct{}

func httpStateFrom(ctx context.Context) *httpState {
	s, _ := ctx.Value(httpKey{}).(*httpState)
	return s
}

func (s *httpState) admit(hs []render.Header) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.headers = hs
	}
}

// deny records the first operation of the request that did not run.
func (s *httpState) deny(status int, hs []render.Header) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.status, s.headers = status, hs
	}
}

// Handler wraps a gqlgen server (or any handler that serves it) so that
// its HTTP responses carry what the extension decided: the rate-limit
// headers of the check (the gate's header style; Retry-After on a
// throttled operation) on every response, and, for an operation that did
// not run, the status the gate answers with instead of 200 (429 when
// throttled or above capacity, 401 without a tenant, 503 when the limiter
// could not decide). Without it an operation that did not run is answered
// 200 with its GraphQL error, as GraphQL over HTTP allows. The tenant must
// be in the request's context (gate.ContextWithTenant) before it: put
// authentication outside Handler.
func (e *Extension) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &httpState{}
		next.ServeHTTP(&responseWriter{ResponseWriter: w, s: s}, r.WithContext(context.WithValue(r.Context(), httpKey{}, s)))
	})
}

// responseWriter sets the headers and the status on the first write.
type responseWriter struct {
	http.ResponseWriter
	s     *httpState
	wrote bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.s.mu.Lock()
		for _, h := range w.s.headers {
			w.Header().Set(h.Name, h.Value)
		}
		if w.s.status != 0 && code == http.StatusOK {
			code = w.s.status
		}
		w.s.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming transports (multipart, server-sent events) flush.
func (w *responseWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack lets the websocket transport take the connection.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("gqllimit: the response writer cannot be hijacked")
	}
	w.wrote = true
	return h.Hijack()
}

// Unwrap is for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
