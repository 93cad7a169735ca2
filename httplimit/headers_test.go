package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
	"github.com/tollgate-go/tollgate/httplimit/adapt"
)

// coreHeaders returns every header core emits: a denial in every header
// style (with Retry-After), and the 401 of a request with no tenant
// (WWW-Authenticate). The names come from core, so a name core adds is
// covered without a list to keep in step.
func coreHeaders(t *testing.T) []render.Header {
	t.Helper()
	d := core.Decision{Reason: core.ReasonOverLimit, Bucket: "default", Quota: quota.PerSecond(10), Limit: 10,
		Tokens: 0.5, RetryAfter: 50 * time.Millisecond, ResetAfter: time.Second, Cost: 1}
	hs := render.Headers(d, render.HeaderIETF|render.HeaderXRateLimit|render.HeaderDraft06, time.Now())
	hs = append(hs, render.Headers(d, render.HeaderXRateLimitEpoch, time.Now())...)
	// an unauthenticated request reaches no store
	lim := testkit.NewUnitLimiter(t)
	g, err := gate.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	v := g.Decide(context.Background(), gate.Endpoint{Method: "GET", Pattern: "/x"})
	if !v.Unauthenticated {
		t.Fatalf("request with no tenant: %+v, want unauthenticated", v)
	}
	hs = append(hs, v.Headers...)
	names := map[string]bool{}
	for _, h := range hs {
		names[h.Name] = true
	}
	// RateLimit-Policy, RateLimit, the X-RateLimit and draft-06 trios,
	// Retry-After, WWW-Authenticate
	if len(names) != 10 {
		t.Fatalf("core emitted %d header names, want 10: %v", len(names), names)
	}
	return hs
}

// Setting core's headers costs one allocation (the values' backing
// array), whatever their names: once a name has been seen, its canonical
// form is not computed again.
func TestSetHeadersAllocatesOnce(t *testing.T) {
	hs := coreHeaders(t)
	h := http.Header{}
	// AllocsPerRun runs the function once before measuring: the first
	// sight of each name
	if n := testing.AllocsPerRun(200, func() { adapt.SetHeaders(h, hs) }); n > 1 {
		t.Fatalf("SetHeaders allocates %v times per call for core's headers, want 1", n)
	}
	for _, hd := range hs {
		key := http.CanonicalHeaderKey(hd.Name)
		if len(h[key]) != 1 {
			t.Errorf("%s: stored as %v, want one value under %q", hd.Name, h, key)
		}
	}
}

// Names seen for the first time by many requests at once are canonicalised
// for every one of them (the race detector watches the cache).
func TestSetHeadersConcurrentFirstSight(t *testing.T) {
	var hs []render.Header
	for i := range 20 {
		hs = append(hs, render.Header{Name: fmt.Sprintf("x-first-sight-%d", i), Value: fmt.Sprint(i)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			h := http.Header{}
			adapt.SetHeaders(h, hs)
			for i := range hs {
				if got := h[fmt.Sprintf("X-First-Sight-%d", i)]; len(got) != 1 || got[0] != fmt.Sprint(i) {
					errs <- fmt.Errorf("header %d: %v", i, h)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
