package retry_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/retry"
)

// server answers with the statuses and Retry-After values of script in
// turn (the last one repeats) and records what it received.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	script []answer
	got    []string // request bodies
	at     []time.Time
}

type answer struct {
	status     int
	retryAfter string
}

func newServer(t *testing.T, script ...answer) *server {
	s := &server{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.got)
		s.got = append(s.got, string(b))
		s.at = append(s.at, time.Now())
		a := s.script[min(n, len(s.script)-1)]
		s.mu.Unlock()
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, "answer "+http.StatusText(a.status))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func TestTransport(t *testing.T) {
	throttled := answer{http.StatusTooManyRequests, "0"}
	ok := answer{http.StatusOK, ""}
	cases := []struct {
		name     string
		script   []answer
		body     bool
		noRewind bool
		opts     []retry.Option
		want     int // final status
		attempts int
	}{
		{"retried then admitted", []answer{throttled, throttled, ok}, true, false, nil, 200, 3},
		{"attempts used up", []answer{throttled}, false, false, nil, 429, 3},
		{"max attempts option", []answer{throttled}, false, false, []retry.Option{retry.WithMaxAttempts(5)}, 429, 5},
		{"never: 429 without Retry-After", []answer{{http.StatusTooManyRequests, ""}, ok}, false, false, nil, 429, 1},
		{"unparsable Retry-After is never", []answer{{http.StatusTooManyRequests, "soon"}, ok}, false, false, nil, 429, 1},
		{"hint over the cap", []answer{{http.StatusTooManyRequests, "120"}, ok}, false, false, []retry.Option{retry.WithMaxDelay(time.Minute)}, 429, 1},
		{"503 with Retry-After retried", []answer{{http.StatusServiceUnavailable, "0"}, ok}, false, false, nil, 200, 2},
		{"503 without Retry-After returned", []answer{{http.StatusServiceUnavailable, ""}, ok}, false, false, nil, 503, 1},
		{"other errors returned", []answer{{http.StatusInternalServerError, "0"}, ok}, false, false, nil, 500, 1},
		{"body without GetBody is not replayed", []answer{throttled, ok}, true, true, nil, 429, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, c.script...)
			client := &http.Client{Transport: retry.NewTransport(nil, append([]retry.Option{retry.WithJitter(0, time.Millisecond)}, c.opts...)...)}
			var body io.Reader
			if c.body {
				body = strings.NewReader("payload")
			}
			req, err := http.NewRequest(http.MethodPost, s.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if c.noRewind {
				req.GetBody = nil
				req.Body = io.NopCloser(strings.NewReader("payload"))
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != c.want || string(b) != "answer "+http.StatusText(c.want) {
				t.Fatalf("got %d %q (%v), want %d", res.StatusCode, b, err, c.want)
			}
			got := s.requests()
			if len(got) != c.attempts {
				t.Fatalf("server saw %d attempts, want %d", len(got), c.attempts)
			}
			if c.body {
				for i, g := range got {
					if g != "payload" {
						t.Fatalf("attempt %d body %q: not replayed", i+1, g)
					}
				}
			}
		})
	}
}

// TestTransportWaitsRetryAfter: a real one-second Retry-After is waited
// out, plus at most the jitter.
func TestTransportWaitsRetryAfter(t *testing.T) {
	s := newServer(t, answer{http.StatusTooManyRequests, "1"}, answer{http.StatusOK, ""})
	client := &http.Client{Transport: retry.NewTransport(nil, retry.WithJitter(0.1, 0))}
	res, err := client.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || len(s.at) != 2 {
		t.Fatalf("status %d after %d attempts", res.StatusCode, len(s.at))
	}
	if gap := s.at[1].Sub(s.at[0]); gap < time.Second || gap > 3*time.Second {
		t.Fatalf("retried after %v, want 1 s to 1.1 s (plus scheduling)", gap)
	}
}

// TestTransportJitter records the transport's waits (no sleeping) for a
// crowd of throttled requests and checks the spread: every wait in
// [Retry-After, 1.2 x Retry-After), and the crowd spread over it.
func TestTransportJitter(t *testing.T) {
	s := newServer(t, answer{http.StatusTooManyRequests, "2"})
	var mu sync.Mutex
	var waits []time.Duration
	rec := func(_ context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return nil
	}
	client := &http.Client{Transport: retry.NewTransport(nil, retry.WithMaxAttempts(2), retry.WithSleep(rec),
		retry.WithRand(rand.New(rand.NewPCG(7, 8))))}
	const n = 200
	for range n {
		res, err := client.Get(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if len(waits) != n {
		t.Fatalf("%d waits for %d throttled requests", len(waits), n)
	}
	var early, late int
	lo, hi := 2*time.Second, 2400*time.Millisecond
	for _, w := range waits {
		if w < lo || w >= hi {
			t.Fatalf("wait %v outside [%v, %v)", w, lo, hi)
		}
		if w < 2200*time.Millisecond {
			early++
		} else {
			late++
		}
	}
	if early < n/3 || late < n/3 {
		t.Fatalf("waits not spread: %d in the first half of the spread, %d in the second", early, late)
	}
}

func TestTransportContext(t *testing.T) {
	t.Run("cancel during the wait", func(t *testing.T) {
		s := newServer(t, answer{http.StatusTooManyRequests, "30"})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
		start := time.Now()
		res, err := (&http.Client{Transport: retry.NewTransport(nil)}).Do(req)
		if err == nil {
			res.Body.Close()
		}
		if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
			t.Fatalf("Do = %v after %v, want context.Canceled at once", err, time.Since(start))
		}
	})
	t.Run("deadline before the retry", func(t *testing.T) {
		s := newServer(t, answer{http.StatusTooManyRequests, "30"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
		start := time.Now()
		res, err := (&http.Client{Transport: retry.NewTransport(nil)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 429 || len(s.requests()) != 1 || time.Since(start) > 5*time.Second {
			t.Fatalf("got %d after %d attempts and %v: want the 429 at once", res.StatusCode, len(s.requests()), time.Since(start))
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"Thu, 01 Jan 2026 00:00:30 GMT", 30 * time.Second, true},
		{"Wed, 31 Dec 2025 23:00:00 GMT", 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"99999999999999999", 0, false},
		{"soon", 0, false},
	}
	for _, c := range cases {
		got, ok := retry.ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
