package adapt

import (
	"fmt"
	"net/http"
	"testing"
)

// The name cache stops growing at its bound; names past it are still
// canonicalised, per call.
func TestCanonicalBounded(t *testing.T) {
	// the cache is the process's: leave it as found for the other tests
	saved := canonicalNames.Load()
	canonicalNames.Store(nil)
	t.Cleanup(func() { canonicalNames.Store(saved) })
	for i := range 3 * maxCanonicalNames {
		name := fmt.Sprintf("x-bounded-%d", i)
		if got, want := canonical(name), http.CanonicalHeaderKey(name); got != want {
			t.Fatalf("canonical(%q) = %q, want %q", name, got, want)
		}
	}
	if n := len(*canonicalNames.Load()); n != maxCanonicalNames {
		t.Fatalf("the cache holds %d names, want its bound %d", n, maxCanonicalNames)
	}
}
