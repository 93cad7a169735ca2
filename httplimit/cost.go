package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
)

// costWriter takes the handler's cost header (WithCostHeader) off the
// response before its header is written, and reports it.
type costWriter struct {
	http.ResponseWriter
	c     *config
	r     *http.Request
	taken bool
}

// take reads, removes and reports the cost header, once.
func (w *costWriter) take() {
	if w.taken {
		return
	}
	w.taken = true
	h := w.ResponseWriter.Header()
	vs := h.Values(w.c.CostHeader)
	if len(vs) == 0 {
		return
	}
	h.Del(w.c.CostHeader)
	n, err := strconv.ParseInt(strings.TrimSpace(vs[len(vs)-1]), 10, 64)
	if err == nil {
		err = gate.ReportCost(w.r.Context(), n)
	}
	if err != nil && w.c.OnError != nil {
		w.c.OnError(w.r, fmt.Errorf("%w: response header %s: %w", core.ErrInvalidRequest, w.c.CostHeader, err))
	}
}

func (w *costWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.take() // an informational (1xx) response is not the response
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *costWriter) Write(b []byte) (int, error) {
	w.take()
	return w.ResponseWriter.Write(b)
}

// Flush sends the header (and what was written) when the original writer
// can flush.
func (w *costWriter) Flush() {
	w.take()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the original writer, for http.ResponseController.
func (w *costWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
