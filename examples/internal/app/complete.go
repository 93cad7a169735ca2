package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/render"
)

// The completion route: a stand-in for an LLM call, whose cost (the tokens
// generated) is known only when it ends.
const (
	// PathComplete is POST with a JSON body {"tokens": N}: class llm, a
	// reservation of the route's cost (100 in tollgate.yaml), settled to N
	// when the handler returns.
	PathComplete = "/v1/complete"
	// ClassLLM is the class of completions, as tollgate.yaml names it.
	ClassLLM = "llm"
	// MaxTokens is the most tokens one completion may report: a larger N
	// is a bad request.
	MaxTokens = 100_000
	// maxCompleteBody bounds how much of a completion's body is read.
	maxCompleteBody = 4 << 10
)

// Completion is the answer of POST /v1/complete.
type Completion struct {
	Tenant string `json:"tenant"`
	// Tokens is what the completion cost, and what its reservation was
	// settled to.
	Tokens int64 `json:"tokens"`
}

// errCompleteBody is why a completion's body was refused.
var errCompleteBody = fmt.Errorf(`the body must be a JSON object {"tokens": N}, N a whole number from 0 to %d`, MaxTokens)

// ParseTokens reads a completion's body, {"tokens": N}, and returns N. A
// body that is not such an object (not JSON, no tokens, N not a whole
// number, N < 0, N > MaxTokens, more than 4 KiB) is an error saying so.
// Other fields are ignored.
func ParseTokens(body io.Reader) (int64, error) {
	var req struct {
		Tokens *int64 `json:"tokens"`
	}
	data, err := io.ReadAll(io.LimitReader(body, maxCompleteBody+1))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: reading it: %v", errCompleteBody, err)
	case len(data) > maxCompleteBody:
		return 0, fmt.Errorf("%w: it is larger than %d bytes", errCompleteBody, maxCompleteBody)
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return 0, fmt.Errorf("%w: %v", errCompleteBody, err)
	}
	switch {
	case req.Tokens == nil:
		return 0, fmt.Errorf("%w: tokens is missing", errCompleteBody)
	case *req.Tokens < 0 || *req.Tokens > MaxTokens:
		return 0, fmt.Errorf("%w: got %d", errCompleteBody, *req.Tokens)
	}
	return *req.Tokens, nil
}

// Complete is the completion handler's work, the same in every framework:
// it reads the body, "generates" N tokens, and reports N as the request's
// actual cost (gate.ReportCost), so that the adapter settles the
// reservation to N when the handler returns. It returns the answer for the
// framework to write: 200 with a Completion, or 400 with a problem+json
// body saying what is wrong with the body; then nothing is reported and the
// reservation stands at the estimate (the route's cost). ctx is the
// request's context, as the limiter's middleware passed it on.
func (a *App) Complete(ctx context.Context, body io.Reader) (status int, contentType string, payload []byte) {
	n, err := ParseTokens(body)
	if err != nil {
		p := render.Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest), Status: http.StatusBadRequest, Detail: err.Error()}
		return p.Status, render.ProblemContentType, p.JSON()
	}
	// n is in range, so an error here only says there is no reservation
	// to settle: the request was admitted without charging the store
	// (failed open, shadow mode, the local fallback). The work is done all
	// the same.
	_ = gate.ReportCost(ctx, n)
	t, _ := gate.TenantFromContext(ctx)
	b, _ := json.Marshal(Completion{Tenant: t.ID, Tokens: n}) // strings and an integer: cannot fail
	return http.StatusOK, "application/json", b
}
