package retry_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tollgate-go/tollgate/core/retry"
)

// An HTTP client that waits out 429s as the server asks, with jitter on
// top, at most four attempts and never more than ten seconds per wait.
func ExampleNewTransport() {
	client := &http.Client{
		Transport: retry.NewTransport(http.DefaultTransport,
			retry.WithMaxAttempts(4),
			retry.WithMaxDelay(10*time.Second)),
	}
	_ = client // client.Get("https://api.example.com/v1/profile")
}

// Delay turns a server's hint into a wait: never shorter than the hint,
// and a "never" answer is not retried at all.
func ExamplePolicy_Delay() {
	p := retry.New(retry.WithJitter(0.2, 0))
	d, err := p.Delay(retry.Hint{After: 1500 * time.Millisecond}, 1)
	fmt.Println(d >= 1500*time.Millisecond && d < 1800*time.Millisecond, err)

	_, err = p.Delay(retry.Hint{Never: true}, 1)
	fmt.Println(err)
	// Output:
	// true <nil>
	// tollgate/retry: not retried: the server answered that the request can never succeed
}
