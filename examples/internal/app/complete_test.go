package app_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/app"
)

// A completion's body is {"tokens": N}, N a whole number from 0 to
// MaxTokens; anything else is refused with an error that says so.
func TestParseTokens(t *testing.T) {
	for body, want := range map[string]int64{
		`{"tokens": 0}`:                                   0,
		`{"tokens": 731}`:                                 731,
		`{"tokens": 731, "model": "x"}`:                   731,
		`{"tokens": ` + strconv.Itoa(app.MaxTokens) + `}`: app.MaxTokens,
	} {
		if n, err := app.ParseTokens(strings.NewReader(body)); err != nil || n != want {
			t.Errorf("%s: %d, %v; want %d", body, n, err, want)
		}
	}
	for _, body := range []string{
		``, `tokens=5`, `[5]`, `{}`, `{"tokens": null}`, `{"tokens": "5"}`, `{"tokens": 1.5}`, `{"tokens": 1e3}`,
		`{"tokens": -1}`, `{"tokens": ` + strconv.Itoa(app.MaxTokens+1) + `}`, `{"tokens": 99999999999999999999999}`,
		`{"tokens": 5} {"tokens": 6}`, `{"tokens": 5, "pad": "` + strings.Repeat("x", 5000) + `"}`,
	} {
		if n, err := app.ParseTokens(strings.NewReader(body)); err == nil || !strings.Contains(err.Error(), `{"tokens": N}`) {
			t.Errorf("%.40q: %d, %v; want an error naming the expected body", body, n, err)
		}
	}
}
