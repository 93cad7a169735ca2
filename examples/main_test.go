package examples_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestMain gives the examples the shared test Redis (REDIS_URL, or a
// private server when it is unset) and fails the run if they leave a key
// there without a TTL or under the production prefix (redistest.CheckKeys).
func TestMain(m *testing.M) {
	u, err := redistest.SharedURL()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Setenv("REDIS_URL", u); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(redistest.RunChecked(m))
}
