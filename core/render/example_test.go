package render_test

import (
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/core/render"
)

// Rendering a denial: the headers and the problem body every adapter sends.
func ExampleHeaders() {
	q := quota.Quota{Capacity: 10, RefillPerSecond: 2}
	d := core.Decision{Reason: core.ReasonOverLimit, Bucket: "default", Quota: q, Limit: 10,
		Tokens: 0.5, RetryAfter: 250 * time.Millisecond, ResetAfter: 4750 * time.Millisecond, Cost: 1}
	for _, h := range render.Headers(d, render.DefaultHeaderStyle, time.Now()) {
		fmt.Printf("%s: %s\n", h.Name, h.Value)
	}
	fmt.Println(render.Status(d), string(render.ProblemOf(d).JSON()))
	// Output:
	// RateLimit-Policy: "default";q=10;w=5
	// RateLimit: "default";r=0;t=1
	// X-RateLimit-Limit: 10
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 5
	// Retry-After: 1
	// 429 {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit of policy \"default\" exceeded: the request costs 1, 0 left; retry in 1 s.","violated-policies":["default"]}
}
