package e2e_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// demoReplicas is the demo's default number of replicas.
const demoReplicas = 4

// repoRoot is the repository root, where the Makefile is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Makefile", "go.work"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("repository root %s: %v", root, err)
		}
	}
	return root
}

// makeDemo runs `make -C <root> demo` with makeArgs (variables) and env
// added to an environment without REDIS_URL, DEMOFLAGS or the calling
// make's own variables, and returns its output and exit code. make and
// everything it starts run in a process group of their own, killed if the
// test ends first.
func makeDemo(t *testing.T, makeBin string, env, makeArgs []string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, makeBin, append([]string{"-C", repoRoot(t), "demo"}, makeArgs...)...)
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "REDIS_URL", "DEMOFLAGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("make demo %s: %v", strings.Join(makeArgs, " "), time.Since(start).Round(time.Millisecond))
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing of the group outlives the test
	}
	if ctx.Err() != nil {
		t.Fatalf("make demo did not finish within 3 minutes:\n%s", out)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("make demo: %v\n%s", err, out)
		return "", 0
	}
}

// demoRow is one row of the demo's table.
type demoRow struct {
	replicas          int
	limit             string
	bound             float64
	sent, admitted    int
	ratio             float64
	raw               string
	present, parseErr bool
}

// demoTable reads the rows of the table the demo prints:
//
//	mode               replicas        limit    bound     sent  admitted   ratio
//	in-process                4       20+5/s       40      800       156   3.90x
//	shared (tollgate)         4       20+5/s       40      799        39   0.97x
func demoTable(t *testing.T, out string) (header bool, rows map[string]demoRow) {
	t.Helper()
	rows = map[string]demoRow{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if strings.Join(f, " ") == "mode replicas limit bound sent admitted ratio" {
			header = true
			continue
		}
		if strings.HasPrefix(line, "concurrency") {
			break // the second table's rows are concurrencyTable's
		}
		for _, mode := range []string{"in-process", "shared (tollgate)"} {
			if !strings.HasPrefix(line, mode+" ") {
				continue
			}
			r := demoRow{raw: strings.TrimSpace(line), present: true}
			rest := strings.Fields(strings.TrimPrefix(line, mode))
			if len(rest) != 6 || !strings.HasSuffix(rest[5], "x") {
				r.parseErr = true
				rows[mode] = r
				continue
			}
			var errs [5]error
			r.replicas, errs[0] = strconv.Atoi(rest[0])
			r.limit = rest[1]
			r.bound, errs[1] = strconv.ParseFloat(rest[2], 64)
			r.sent, errs[2] = strconv.Atoi(rest[3])
			r.admitted, errs[3] = strconv.Atoi(rest[4])
			r.ratio, errs[4] = strconv.ParseFloat(strings.TrimSuffix(rest[5], "x"), 64)
			r.parseErr = errors.Join(errs[:]...) != nil
			rows[mode] = r
		}
	}
	return header, rows
}

// progressLine is a progress line of the demo: its mode and elapsed time,
// and whether it is the mode's "done" line.
var progressLine = regexp.MustCompile(`^(.+?\s+[0-9.]+s)\s+sent\s+[0-9]+\s+admitted\s+[0-9]+(\s+done)?$`)

// checkDemo holds the demo's output to what the README says it shows.
func checkDemo(t *testing.T, out string, code int, store string) {
	t.Helper()
	if code != 0 {
		t.Errorf("make demo exited %d, want 0", code)
	}
	if !strings.Contains(out, "\nstore: "+store) {
		t.Errorf("the demo does not say its store is %q", store)
	}
	if strings.Contains(out, "\r") {
		t.Error("the progress line is rewritten in place although the output is not a terminal")
	}
	if !strings.Contains(out, "done") {
		t.Error("no final progress line")
	}
	// Each mode's progress ends with its "done" line, not with a periodic
	// line of the same second printed just before it.
	var last string // mode and elapsed of the previous progress line
	for _, line := range strings.Split(out, "\n") {
		m := progressLine.FindStringSubmatch(line)
		if m == nil {
			last = ""
			continue
		}
		if m[2] != "" && m[1] == last {
			t.Errorf("the last progress line is printed twice: a periodic line of %q, then its done line:\n%s", m[1], out)
		}
		last = m[1]
	}
	header, rows := demoTable(t, out)
	if !header {
		t.Error("no table header: mode replicas limit bound sent admitted ratio")
	}
	in, sh := rows["in-process"], rows["shared (tollgate)"]
	for mode, r := range rows {
		if r.parseErr {
			t.Errorf("%s row does not parse: %q", mode, r.raw)
			continue
		}
		if r.replicas != demoReplicas || r.limit != "20+5/s" || r.bound < 20 {
			t.Errorf("%s row %q: want %d replicas, limit 20+5/s and a bound of at least the capacity", mode, r.raw, demoReplicas)
		}
		if float64(r.sent) <= r.bound {
			t.Errorf("%s row %q: sent no more than the bound; the demo showed nothing", mode, r.raw)
		}
		// ratio is admitted over the unrounded bound; the printed bound is
		// rounded to a whole number.
		if want := float64(r.admitted) / r.bound; math.Abs(r.ratio-want) > 0.05*want+0.01 {
			t.Errorf("%s row %q: ratio %.2f, but admitted/bound is %.2f", mode, r.raw, r.ratio, want)
		}
	}
	if !in.present || !sh.present || in.parseErr || sh.parseErr {
		t.Fatalf("want an in-process and a shared row:\n%s", out)
	}
	// The shared bucket holds the token-bucket bound...
	if sh.admitted < 1 || float64(sh.admitted) > sh.bound+0.5 || sh.ratio > 1.0 {
		t.Errorf("shared row %q: want 1..bound admitted, ratio <= 1.00x", sh.raw)
	}
	if sh.ratio < 0.5 {
		t.Errorf("shared row %q: ratio %.2f, far below its quota", sh.raw, sh.ratio)
	}
	// ...and N in-process limiters admit about N times it.
	if in.ratio < demoReplicas/2 || in.admitted <= sh.admitted {
		t.Errorf("in-process row %q: ratio %.2f, want about %dx (at least %dx) and more than the shared row", in.raw, in.ratio, demoReplicas, demoReplicas/2)
	}
	if !strings.Contains(out, strconv.Itoa(demoReplicas)+" in-process limiters admit about") {
		t.Error("no closing sentence")
	}
}

// concurrencyTable returns the peak in flight of each row of the demo's
// second table, by mode, and whether its header was printed.
func concurrencyTable(t *testing.T, out string) (header bool, peaks map[string]int) {
	t.Helper()
	peaks = map[string]int{}
	in := false
	for line := range strings.Lines(out) {
		if strings.Join(strings.Fields(line), " ") == "mode replicas in flight sent admitted peak in flight" {
			header, in = true, true
			continue
		}
		if !in {
			continue
		}
		for _, mode := range []string{"in-process", "shared (tollgate)"} {
			if !strings.HasPrefix(line, mode+" ") {
				continue
			}
			rest := strings.Fields(strings.TrimPrefix(line, mode))
			peak := -1
			if len(rest) == 5 {
				if n, err := strconv.Atoi(rest[4]); err == nil {
					peak = n
				}
			}
			if peak < 0 {
				t.Errorf("%s row of the concurrency table does not parse: %q", mode, line)
			}
			peaks[mode] = peak
		}
	}
	return header, peaks
}

// checkConcurrencyTable checks the demo's second table: 4 replicas, the
// tenant allowed 2 in flight (the default); semaphores per replica let more
// run at once, tollgate's slots at most 2.
func checkConcurrencyTable(t *testing.T, out string) {
	t.Helper()
	header, peaks := concurrencyTable(t, out)
	in, inOK := peaks["in-process"]
	sh, shOK := peaks["shared (tollgate)"]
	switch {
	case !header || !inOK || !shOK:
		t.Error("no concurrency table with an in-process and a shared row")
	case sh < 1 || sh > 2:
		t.Errorf("tollgate's peak in flight is %d, want 1..2", sh)
	case in <= 2:
		t.Errorf("in-process peak in flight is %d, want more than 2", in)
	}
}

// The README's first command, `make demo`, as a user runs it: from the
// repository root, with the embedded server when REDIS_URL is unset and the
// real Redis when set. Its table must show both modes, the shared bucket
// within the bound, the in-process limiters well above it, and exit 0.
func TestMakeDemo(t *testing.T) {
	t.Parallel()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("make demo needs make on PATH: %v", err)
		}
		t.Skipf("make demo needs make on PATH: %v (skipped outside CI)", err)
	}

	t.Run("no REDIS_URL: the embedded server, exactly as the README runs it", func(t *testing.T) {
		out, code := makeDemo(t, makeBin, nil, nil)
		checkDemo(t, out, code, "embedded in-process Redis-compatible server")
		checkConcurrencyTable(t, out)
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})

	t.Run("REDIS_URL: the real Redis", func(t *testing.T) {
		url := redistest.URL(t)
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		// A shorter run through the Makefile's DEMOFLAGS; the default run
		// above is the README's.
		out, code := makeDemo(t, makeBin, []string{"REDIS_URL=" + url}, []string{"DEMOFLAGS=-duration 1500ms"})
		checkDemo(t, out, code, "Redis at "+opt.Addr+" (REDIS_URL)")
		if !strings.Contains(out, "for 1.5s per mode") {
			t.Error("DEMOFLAGS did not reach the demo")
		}
		checkConcurrencyTable(t, out)
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})
}
