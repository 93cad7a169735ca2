package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tollgate-go/tollgate/core"
)

// ErrNotSent reports that NewTransport's RoundTripper did not send a request: the shared
// quota did not admit it within its wait, its context ended first, or the
// store failed and the limiter fails closed.
var ErrNotSent = errors.New("httplimit: request not sent")

type transport struct {
	lim     *core.Limiter
	base    http.RoundTripper
	request func(*http.Request) core.Request
	actual  func(*http.Response) (int64, bool)
}

// NewTransport returns an http.RoundTripper that waits on lim's shared
// buckets before it sends each request through base (nil:
// http.DefaultTransport): request names the tenant, class and cost of an
// outgoing request, and core.Limiter.Wait waits its turn, the longest wait
// being the time left until the request context's deadline (without one,
// the limiter's WithMaxWait). Across every process that calls the same
// upstream through the same buckets, the upstream then receives at most
// their quota (see core.Limiter.Reserve for the bound and the order).
//
// A request the quota does not admit in time, whose context ends first,
// or that the store fails closed is not sent: RoundTrip returns an error
// wrapping ErrNotSent (and the context's error, or core.ErrStore, when
// that was the cause). A request the store fails open is sent at once.
//
// actual, when not nil, reads what a request really cost from its response
// (a header an upstream sets with the tokens it used): ok true settles the
// request's reservation to that cost (core.Limiter.Settle) once the
// response has arrived; a settle that fails leaves the estimate standing
// (core logs a store failure; a request with AlsoCosts different from its
// Cost is never settled). nil: the estimate stands.
//
// A nil limiter or request function panics here.
func NewTransport(lim *core.Limiter, base http.RoundTripper, request func(*http.Request) core.Request, actual func(*http.Response) (cost int64, ok bool)) http.RoundTripper {
	if lim == nil {
		panic("httplimit.NewTransport: nil limiter")
	}
	if request == nil {
		panic("httplimit.NewTransport: nil request function")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{lim: lim, base: base, request: request, actual: actual}
}

// RoundTrip waits its turn on the shared buckets, then sends r.
func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	req := t.request(r)
	d, err := t.lim.Wait(r.Context(), req)
	if !d.Allowed {
		closeBody(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotSent, d.Reason, err)
		}
		return nil, fmt.Errorf("%w: %s (retry after %v)", ErrNotSent, d.Reason, d.RetryAfter)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || t.actual == nil || !d.Settleable() {
		return resp, err
	}
	if cost, ok := t.actual(resp); ok {
		_, _ = t.lim.Settle(context.WithoutCancel(r.Context()), req.Tenant, d, cost) // a failure leaves the estimate
	}
	return resp, nil
}

// closeBody closes the body of a request not sent, as a RoundTripper must.
func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}
