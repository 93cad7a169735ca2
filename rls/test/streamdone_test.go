package test

import (
	"testing"

	"github.com/tollgate-go/tollgate/internal/testkit"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestStreamDoneHits: Envoy's apply_on_stream_done sends a second
// ShouldRateLimit when the stream ends, with the real hits_addend (an LLM's
// tokens). tollgate-rls charges it as any check: admitted and charged in
// full while the balance holds it, OVER_LIMIT and charged nothing when it
// does not (Envoy ignores that answer: the stream is over), so the charged
// usage never exceeds capacity + refill × elapsed, and a stream-end charge
// larger than the balance goes unbilled (docs/envoy.md, "Charging at stream
// end").
func TestStreamDoneHits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, c redis.UniversalClient) {
		clock := testkit.NewFakeClock() // frozen: no refill
		lim := newLimiter(t, c, core.WithClock(clock.Now))
		client := serve(t, lim)
		start := request(1, desc("tenant", "s1", "class", "export"))
		if res := ask(t, client, start); res.GetOverallCode() != rlsv3.RateLimitResponse_OK || stored(t, c, lim, "s1", "export") != 9 {
			t.Fatalf("request start, hits 1 of 10: %v", res)
		}
		done := desc("tenant", "s1", "class", "export")
		done.HitsAddend = wrapperspb.UInt64(5)
		if res := ask(t, client, request(0, done)); res.GetOverallCode() != rlsv3.RateLimitResponse_OK || stored(t, c, lim, "s1", "export") != 4 {
			t.Fatalf("stream done, 5 real hits of 9: %v", res)
		}
		done.HitsAddend = wrapperspb.UInt64(7)
		if res := ask(t, client, request(0, done)); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || stored(t, c, lim, "s1", "export") != 4 {
			t.Fatalf("stream done, 7 real hits of 4: %v; want OVER_LIMIT and nothing charged", res)
		}
		if res := ask(t, client, start); res.GetOverallCode() != rlsv3.RateLimitResponse_OK || stored(t, c, lim, "s1", "export") != 3 {
			t.Fatalf("the next request start: %v", res)
		}
	})
}
