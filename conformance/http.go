package conformance

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// RelevantHeaders are the response headers the suite compares (canonical
// names; compared case-insensitively). Every other header is dropped.
var RelevantHeaders = []string{
	"Content-Type",
	"Ratelimit",
	"Ratelimit-Limit",
	"Ratelimit-Policy",
	"Ratelimit-Remaining",
	"Ratelimit-Reset",
	"Retry-After",
	"X-Ratelimit-Limit",
	"X-Ratelimit-Remaining",
	"X-Ratelimit-Reset",
	"Www-Authenticate",
}

// grpcHeaders are the headers compared for ProtocolGRPC targets.
var grpcHeaders = []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"}

// NewHTTPRequest builds the HTTP request for r: the endpoint's method (or
// r.Method) and URL, r's Authorization, r's extra headers, and RemoteAddr set to r's
// client IP (port 40000). Targets that serve an http.Handler use
// [HandlerInstance] instead; others (Fiber) translate this request.
func NewHTTPRequest(r Request) (*http.Request, error) {
	e, ok := httpEndpoint(r.Endpoint, r.Param)
	if !ok {
		return nil, fmt.Errorf("conformance: unknown endpoint %q", r.Endpoint)
	}
	method := e.Method
	if r.Method != "" {
		method = r.Method
	}
	req := httptest.NewRequest(method, "http://service.test"+e.URL(r.Param), nil)
	if a := r.Authorization(); a != "" {
		req.Header.Set("Authorization", a)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	req.RemoteAddr = net.JoinHostPort(r.IP(), "40000")
	return req, nil
}

// Counter counts handler calls; safe for concurrent use. Targets' handlers
// call Inc, and Instance.HandlerCalls returns Load.
type Counter struct {
	n atomic.Int64
	// during, when set, runs inside the handler (a scenario's look at what
	// holds while a handler runs)
	during atomic.Pointer[func()]
}

// Inc adds one call.
func (c *Counter) Inc() {
	c.n.Add(1)
	if f := c.during.Load(); f != nil {
		(*f)()
	}
}

// Load returns the number of calls.
func (c *Counter) Load() int { return int(c.n.Load()) }

// HandlerInstance returns an Instance that serves requests with h in
// process (no network) and reports calls as its handler calls. It suits
// every target whose service is an http.Handler (net/http, Gin, Echo).
func HandlerInstance(h http.Handler, calls *Counter) Instance {
	return handlerInstance{h, calls}
}

type handlerInstance struct {
	h     http.Handler
	calls *Counter
}

func (i handlerInstance) Do(r Request) (Response, error) {
	req, err := NewHTTPRequest(r)
	if err != nil {
		return Response{}, err
	}
	rec := httptest.NewRecorder()
	i.h.ServeHTTP(rec, req)
	res := rec.Result()
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: body}, nil
}

func (i handlerInstance) HandlerCalls() int { return i.calls.Load() }

func (i handlerInstance) counter() *Counter { return i.calls }

// counted is an Instance whose handlers' Counter the suite can reach
// (HandlerInstance's), to look at what holds while a handler runs.
type counted interface{ counter() *Counter }

// HTTPTarget adapts a function to a ProtocolHTTP Target.
type HTTPTarget func(t testing.TB, s Setup) (Instance, error)

// Protocol returns ProtocolHTTP.
func (HTTPTarget) Protocol() Protocol { return ProtocolHTTP }

// NewInstance calls f.
func (f HTTPTarget) NewInstance(t testing.TB, s Setup) (Instance, error) { return f(t, s) }

// normalise keeps the headers of names, with canonical names and their
// values in order.
func normalise(h http.Header, names []string) [][2]string {
	var out [][2]string
	for _, n := range names {
		for k, vs := range h {
			if !strings.EqualFold(k, n) {
				continue
			}
			for _, v := range vs {
				out = append(out, [2]string{n, v})
			}
		}
	}
	return out
}
