package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		file string
		want wrkResult
	}{
		// captured from wrk 4.1.0 (Debian) against the service: a good
		// token, then a bad one (every answer a 401)
		{"testdata/wrk-200.txt", wrkResult{Requests: 19306, Seconds: 1.00, RPS: 19286.96, P50: 560, P99: 34520}},
		{"testdata/wrk-401.txt", wrkResult{Requests: 40568, Seconds: 1.11, RPS: 36413.67, P50: 214, P99: 15360, Non2xx: 40568}},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseWrk(string(b))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !near(got.Seconds, tc.want.Seconds) || !near(got.P50, tc.want.P50) || !near(got.P99, tc.want.P99) || !near(got.RPS, tc.want.RPS) {
			t.Errorf("%s: got %+v, want %+v", tc.file, got, tc.want)
		}
		got.Seconds, got.P50, got.P99, got.RPS = tc.want.Seconds, tc.want.P50, tc.want.P99, tc.want.RPS
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.file, got, tc.want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// A report without --latency, or cut short, is an error, not zeros.
func TestParseWrkIncomplete(t *testing.T) {
	b, err := os.ReadFile("testdata/wrk-200.txt")
	if err != nil {
		t.Fatal(err)
	}
	var noLatency []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasSuffix(f[0], "%") {
			continue
		}
		noLatency = append(noLatency, line)
	}
	for name, out := range map[string]string{
		"no --latency": strings.Join(noLatency, "\n"),
		"cut short":    string(b[:len(b)/2]),
		"empty":        "",
	} {
		if _, err := parseWrk(out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseWrkSocketErrors(t *testing.T) {
	b, err := os.ReadFile("testdata/wrk-200.txt")
	if err != nil {
		t.Fatal(err)
	}
	// wrk adds this line when any connection failed
	out := strings.Replace(string(b), "Requests/sec:", "  Socket errors: connect 0, read 3, write 1, timeout 12\nRequests/sec:", 1)
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.SocketErrors != 16 {
		t.Errorf("socket errors %d, want 16", got.SocketErrors)
	}
}

func TestWrkDuration(t *testing.T) {
	for in, want := range map[string]float64{"560.00us": 560, "34.52ms": 34520, "1.11s": 1.11e6, "1.00m": 60e6} {
		got, err := wrkDuration(in)
		if err != nil || !near(got, want) {
			t.Errorf("wrkDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "12", "ms", "1.2.3ms", "5d"} {
		if _, err := wrkDuration(in); err == nil {
			t.Errorf("wrkDuration(%q): no error", in)
		}
	}
}
