package gate

import (
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// Verdict is a Gate's answer, ready to render: the adapter sets Headers on
// the response, then either calls the handler (Proceed) or writes Status,
// ContentType and Body. An adapter computes nothing else.
type Verdict struct {
	// Proceed reports whether the handler should run.
	Proceed bool
	// Status is the HTTP status to answer with when !Proceed: 401 without a
	// tenant, 400 for an invalid request, 429 for a denial, 503 when the
	// store failed under fail-closed, the check was shed or the request's
	// own context ended, and 500 for a misconfiguration (no quota for the
	// request, or a CostFunc answer that breaks the route table's rules).
	Status int
	// Headers are set on the response whether or not it proceeds.
	Headers []render.Header
	// ContentType and Body are the problem+json answer when !Proceed.
	ContentType string
	Body        []byte
	// Problem is Body, decoded.
	Problem render.Problem

	// Decision is the limiter's decision (zero when no check ran:
	// unauthenticated or exempt).
	Decision core.Decision
	// Tenant is who was charged.
	Tenant quota.Tenant
	// Route is the class and cost that applied.
	Route Route
	// Checked is false when no check ran (exempt route, no tenant).
	Checked bool
	// Unmatched is set when the request reaches no handler of the service
	// (Endpoint.Routed false): it proceeds to the framework's own 404 or
	// 405, unchecked and without headers.
	Unmatched bool
	// Unauthenticated is set when no tenant was in the context and
	// anonymous callers are not allowed.
	Unauthenticated bool
	// Held is how long the gate held the request before answering
	// (WithHold); 0 when it was not held.
	Held time.Duration
	// Err is the limiter's error (store failure, invalid request), for the
	// adapter's error hook; the Verdict already applies the failure policy.
	Err error

	report *costReport // nil: nothing to settle (see CostContext)
}

// Done ends the request as far as the limiter is concerned: it releases the
// concurrency slot the request holds (core.Decision.Slot), if any, and settles
// the request's reservation with the cost its handler reported (ReportCost;
// one more round trip, bounded by the check timeout), once. Call it when
// the handler returns, panics included (defer v.Done()), or, for a stream,
// when the stream ends. It returns once the store answered the release
// (one round trip, bounded by the check timeout; see Slot.Release), so the
// client's next request finds the slot free; it is safe to call more than
// once and does nothing when no slot is held.
func (v Verdict) Done() {
	v.Decision.Slot.Release()
	v.settle()
}
