package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// mainEnv makes the test binary run the demo's main instead of the tests,
// so that its exit code can be checked.
const mainEnv = "TOLLGATE_REPLICAS_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	apptest.Main(m)
}

func result(t *testing.T, rs []Result, mode string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Mode == mode {
			return r
		}
	}
	t.Fatalf("no %s result in %+v", mode, rs)
	return Result{}
}

// The demo's claim, on a real Redis: N in-process limiters admit about N
// times the limit, the shared bucket at most the limit.
func TestSharedBucketHoldsTheBoundInProcessDoesNot(t *testing.T) {
	const replicas = 3
	o := Options{Replicas: replicas, Quota: quota.Quota{Capacity: 10, RefillPerSecond: 5}, Duration: 1500 * time.Millisecond,
		RPS: 150, Prefix: redistest.Prefix(t)}
	rs, err := Run(t.Context(), redistest.Client(t), o)
	if err != nil {
		t.Fatal(err)
	}
	in, sh := result(t, rs, ModeInProcess), result(t, rs, ModeShared)
	t.Logf("in-process: %d of %d (bound %.1f, %.2fx); shared: %d of %d (bound %.1f, %.2fx)",
		in.Admitted, in.Sent, in.Bound, in.Ratio(), sh.Admitted, sh.Sent, sh.Bound, sh.Ratio())
	if !sh.Held() {
		t.Errorf("shared admitted %d, want 1..%.1f (capacity + rate x elapsed)", sh.Admitted, sh.Bound)
	}
	if sh.Ratio() < 0.5 {
		t.Errorf("shared ratio %.2f: the shared bucket admitted far less than its quota", sh.Ratio())
	}
	if in.Admitted <= sh.Admitted || in.Ratio() < 0.6*replicas {
		t.Errorf("in-process admitted %d (%.2fx), want about %dx and more than shared (%d)", in.Admitted, in.Ratio(), replicas, sh.Admitted)
	}
}

func TestRunPrintsTheTable(t *testing.T) {
	env := map[string]string{"REDIS_URL": redistest.URL(t)}
	var out, errs bytes.Buffer
	err := run(t.Context(), []string{"-replicas", "2", "-duration", "700ms", "-rps", "100", "-concurrency-duration", "500ms"}, func(k string) string { return env[k] }, &out, &errs, false)
	if err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errs.String())
	}
	s := out.String()
	for _, want := range []string{"store: Redis at", "mode ", "replicas", "limit", "admitted", "ratio", ModeInProcess, ModeShared, "20+5/s", "done",
		"peak in flight", "tollgate's slots hold 2 across the fleet"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// Not a terminal: whole lines, never a carriage return.
	if strings.Contains(s, "\r") {
		t.Errorf("progress rewrites lines in place although the output is not a terminal:\n%q", s)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-replicas", "0"}, {"-replicas", "1000"}, {"-capacity", "0"}, {"-rate", "-1"}, {"-rate", "NaN"},
		{"-duration", "0s"}, {"-duration", "10m"}, {"-rps", "0"}, {"extra"}, {"-bogus"},
		{"-concurrency", "0"}, {"-concurrency", "1000"}, {"-callers", "0"}, {"-hold", "0s"}, {"-hold", "1h"},
		{"-concurrency-duration", "0s"},
	} {
		var out, errs bytes.Buffer
		if err := run(t.Context(), args, func(string) string { return "" }, &out, &errs, false); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestHeld(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want bool
	}{
		{Result{Admitted: 40, Bound: 40}, true},
		{Result{Admitted: 41, Bound: 40.5}, false},
		{Result{Admitted: 0, Bound: 40}, false},
	} {
		if got := c.r.Held(); got != c.want {
			t.Errorf("%+v: Held = %v", c.r, got)
		}
	}
}

// The demo as make demo runs it: exit 0 and the table on a real Redis, 1
// and a message on bad input.
func TestExitCode(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"holds", []string{"-replicas", "2", "-duration", "500ms", "-rps", "100"}, 0, "shared (tollgate)"},
		{"bad flag", []string{"-replicas", "0"}, 1, "-replicas 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], c.args...)
			cmd.Env = append(os.Environ(), mainEnv+"=1", "REDIS_URL="+redistest.URL(t))
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(string(out), c.want) {
				t.Errorf("exit %d, want %d; output lacks %q?\n%s", code, c.code, c.want, out)
			}
		})
	}
}

// Not on a terminal, a mode's progress ends with one "done" line: the
// periodic line due as the run ends is not printed as well (it would
// repeat the last line with the same figures).
func TestProgressPrintsTheLastLineOnce(t *testing.T) {
	for i := range 4 {
		var out bytes.Buffer
		o := Options{Replicas: 1, Quota: quota.Quota{Capacity: 10, RefillPerSecond: 5}, Duration: time.Second, RPS: 20, Progress: &out}
		mk := func() (http.Handler, func(), error) { return service(), func() {}, nil }
		if _, err := drive(t.Context(), "m", mk, "", o); err != nil {
			t.Fatalf("drive: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 1 || !strings.HasSuffix(lines[0], "done") {
			t.Fatalf("run %d: want one line, the done line, for a 1 s run with a progress line a second; got:\n%s", i, out.String())
		}
	}
}

// The second table's claim, on a real Redis: per-replica semaphores of N
// let more than N of the tenant's handlers run at once across the fleet;
// tollgate's slots never more than N, and they let some run.
func TestSlotsHoldTheConcurrencyLimitInProcessDoesNot(t *testing.T) {
	o := ConcurrencyOptions{Replicas: 4, Limit: 2, Callers: 32, Hold: 50 * time.Millisecond, Duration: time.Second, Prefix: redistest.Prefix(t)}
	rs, err := RunConcurrency(t.Context(), redistest.Client(t), o)
	if err != nil {
		t.Fatal(err)
	}
	var in, sh ConcurrencyResult
	for _, r := range rs {
		switch r.Mode {
		case ModeInProcess:
			in = r
		case ModeShared:
			sh = r
		}
	}
	t.Logf("in-process: peak %d, %d of %d; tollgate: peak %d, %d of %d (limit %d)", in.Peak, in.Admitted, in.Sent, sh.Peak, sh.Admitted, sh.Sent, o.Limit)
	if !sh.Held() || sh.Peak > o.Limit {
		t.Errorf("tollgate: peak %d in flight, admitted %d; want 1..%d in flight and something admitted", sh.Peak, sh.Admitted, o.Limit)
	}
	if in.Peak <= o.Limit || in.Peak > int64(o.Replicas)*o.Limit {
		t.Errorf("in-process: peak %d in flight, want more than %d (up to %d)", in.Peak, o.Limit, int64(o.Replicas)*o.Limit)
	}
}

func TestConcurrencyHeld(t *testing.T) {
	for _, c := range []struct {
		r    ConcurrencyResult
		want bool
	}{
		{ConcurrencyResult{Limit: 2, Peak: 2, Admitted: 10}, true},
		{ConcurrencyResult{Limit: 2, Peak: 3, Admitted: 10}, false},
		{ConcurrencyResult{Limit: 2, Peak: 0, Admitted: 0}, false},
	} {
		if got := c.r.Held(); got != c.want {
			t.Errorf("%+v: Held = %v", c.r, got)
		}
	}
}

// Without REDIS_URL the demo runs both tables on the embedded server,
// and tollgate's slots hold the limit there too.
func TestRunShowsTheConcurrencyTableOnTheEmbeddedServer(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(t.Context(), []string{"-replicas", "2", "-duration", "300ms", "-rps", "50", "-concurrency-duration", "500ms"}, func(string) string { return "" }, &out, &errs, false)
	if err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errs.String())
	}
	s := out.String()
	for _, want := range []string{"store: embedded", "peak in flight", "tollgate's slots hold 2 across the fleet"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
