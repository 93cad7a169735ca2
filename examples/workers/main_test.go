package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestMain runs a worker when this binary is started as one (the demo
// re-starts its own binary for each worker process).
func TestMain(m *testing.M) {
	if isWorker() {
		if err := runWorker(); err != nil {
			os.Stderr.WriteString("worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(redistest.RunChecked(m))
}

func resultOf(t *testing.T, rs []Result, mode string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Mode == mode {
			return r
		}
	}
	t.Fatalf("no %s result in %+v", mode, rs)
	return Result{}
}

// The demo's claim, end to end on a real Redis with real worker processes:
// the waiting workers stay within both of the upstream's quotas and are
// never answered 429; the naive ones are, and waste calls.
func TestWaitingWorkersStayWithinBothQuotas(t *testing.T) {
	o := Options{Workers: 3, Goroutines: 6, Duration: 3 * time.Second, Estimate: 300,
		Requests: quota.Quota{Capacity: 20, RefillPerSecond: 10},
		Tokens:   quota.Quota{Capacity: 3000, RefillPerSecond: 1500},
		RedisURL: redistest.URL(t), Prefix: redistest.Prefix(t)}
	rs, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printTable(&out, rs)
	t.Logf("\n%s", out.String())
	naive, waiting := resultOf(t, rs, ModeNaive), resultOf(t, rs, ModeWaiting)
	if !waiting.Held() {
		t.Errorf("waiting workers: %+v, want no 429 and jobs <= %.1f, tokens <= %.1f", waiting, waiting.RequestsBound, waiting.TokensBound)
	}
	if naive.TooMany == 0 {
		t.Errorf("naive workers were never answered 429: %+v", naive)
	}
	// waiting costs little throughput: the waiting workers get most of
	// what the quotas allow over their run (the binding one, tokens, at an
	// average use of 2/3 of the estimate)
	if jobs, allowed := float64(waiting.Jobs), min(waiting.RequestsBound, waiting.TokensBound/(float64(o.Estimate)*2/3)); jobs < 0.7*allowed {
		t.Errorf("waiting workers did %v jobs, under 0.7 x the %.1f the quotas allow", jobs, allowed)
	}
}

// The command parses its flags and refuses what it cannot run.
func TestRunRefusesBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(t.Context(), []string{"-workers", "0"}, func(string) string { return "" }, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("run -workers 0: %v", err)
	}
}
