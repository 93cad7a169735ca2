// Command testsum reads the event stream of go test -json on its standard
// input and prints what go test prints without -json and without -v (each
// package's result line, and the whole output of every test that failed),
// then the tests that were skipped, each with its reason, and a count:
// a skipped test is not silent, and nothing a failure printed is dropped.
// It exits 1 if any test or package failed, else 0; make test also passes
// on go test's own exit status.
//
//	go test -json ./... | go run ./tools/testsum
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build output (Go 1.24 and later)
}

type skip struct{ pkg, test, reason string }

type summary struct {
	passed, failed, skipped int
	skips                   []skip
	bad                     bool // a test or package failed, or a build did
}

func main() {
	s, err := summarise(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(1)
	}
	if s.bad {
		os.Exit(1)
	}
}

func summarise(in io.Reader, out io.Writer) (summary, error) {
	var s summary
	// the output of each running test, by package and test, printed only if
	// it fails (or its package fails while it runs: a panic, a timeout)
	running := map[string]map[string][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // not an event: as it came
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
			continue
		case e.Action == "build-fail":
			s.bad = true
			continue
		case e.Test == "":
			if e.Action == "output" && e.Output != "PASS\n" { // go test without -v prints no PASS line
				fmt.Fprint(out, e.Output)
			}
			if e.Action == "fail" {
				s.bad = true
				for _, lines := range running[e.Package] { // what was running when the package died
					fmt.Fprint(out, strings.Join(lines, ""))
				}
				delete(running, e.Package)
			}
			continue
		}
		tests := running[e.Package]
		if tests == nil {
			tests = map[string][]string{}
			running[e.Package] = tests
		}
		switch e.Action {
		case "output":
			tests[e.Test] = append(tests[e.Test], e.Output)
		case "pass":
			s.passed++
			delete(tests, e.Test)
		case "fail":
			s.failed++
			s.bad = true
			fmt.Fprint(out, strings.Join(tests[e.Test], ""))
			delete(tests, e.Test)
		case "skip":
			s.skipped++
			s.skips = append(s.skips, skip{e.Package, e.Test, skipReason(tests[e.Test])})
			delete(tests, e.Test)
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(out, "\nskipped (%d):\n", len(s.skips))
		for _, k := range s.skips {
			fmt.Fprintf(out, "--- SKIP: %s (%s): %s\n", k.test, k.pkg, k.reason)
		}
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	return s, nil
}

// skipReason is what a skipped test said: its output but the framework's
// own lines (=== RUN, --- SKIP), on one line.
func skipReason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " ")
}
