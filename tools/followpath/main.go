// Command followpath follows one request through core's check path and
// counts the files of core it enters and how many times it returns to a
// file it already left (docs/internals/following-one-request.md).
//
// It runs core/test's TestFollowOneRequest under Delve's tracer (dlv
// trace, with a tracepoint on every function of core and its internal
// packages), takes the calls and returns of the one goroutine that runs
// the followed Gate.Decide, from its entry to its return, and replays them
// as a stack of files: the file the path is in is the file of the function
// on top. A file the path moves to that it had already been in and left is
// one return.
//
//	cd tools && go run ./followpath          # needs dlv on PATH and REDIS_URL
//	cd tools && go run ./followpath -trace trace.txt   # from a saved dlv trace -s 1
//
// -max fails the command when the path returns more often.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

var verbose = os.Getenv("FOLLOWPATH_VERBOSE") != ""

// corePkg prefixes the functions of core and its packages.
const corePkg = "github.com/tollgate-go/tollgate/core"

// followed is the test function whose one call is followed.
const followed = "test_test.followedDecide"

var (
	ansi    = regexp.MustCompile("\x1b\\[[0-9;]*m")
	callRE  = regexp.MustCompile(`^> goroutine\((\d+)\): (?:\[\d+\] )?([^ (]+(?:\(\*?[^)]+\)\.[^ (]+)?)\(`)
	retRE   = regexp.MustCompile(`^>> goroutine\((\d+)\): (?:\[\d+\] )?(\S+) => `)
	frameRE = regexp.MustCompile(`^\s*at (\S+):\d+$`)
)

func main() {
	root := flag.String("root", "..", "the repository root")
	trace := flag.String("trace", "", "a saved `dlv trace -s 1` output to read instead of running dlv")
	save := flag.String("save", "", "also write dlv's trace to this file")
	maxReturns := flag.Int("max", -1, "fail when the path returns to a file it left more often than this (-1: never)")
	flag.Parse()
	abs, err := filepath.Abs(*root)
	if err != nil {
		fatal(err)
	}
	var out []byte
	if *trace != "" {
		out, err = os.ReadFile(*trace)
	} else {
		out, err = runTrace(abs)
		if err == nil && *save != "" {
			err = os.WriteFile(*save, out, 0o644)
		}
	}
	if err != nil {
		fatal(err)
	}
	seq, err := follow(bytes.NewReader(out), abs)
	if err != nil {
		fatal(err)
	}
	files, returns, calls := count(seq)
	fmt.Printf("followed %s: %d files of core entered, %d returns to a file already left (%d of them calls back into it, %d callees' returns)\n",
		followed, files, returns, calls, returns-calls)
	seen := map[string]bool{}
	for i, m := range seq {
		how, again := "<", ""
		if m.call {
			how = ">"
		}
		if seen[m.file] {
			again = "  (again)"
		}
		seen[m.file] = true
		fmt.Printf("%3d %s %s%s\n", i+1, how, m.file, again)
	}
	if *maxReturns >= 0 && returns > *maxReturns {
		fatal(fmt.Errorf("%d returns, more than %d", returns, *maxReturns))
	}
}

// runTrace runs the followed test under dlv trace and returns the trace.
func runTrace(root string) ([]byte, error) {
	cmd := exec.Command("dlv", "trace", "-s", "1", "-t", ".",
		"^"+regexp.QuoteMeta(corePkg)+`(/internal)?(/[a-z]+)?\.|`+regexp.QuoteMeta(followed)+`$`,
		"--", "-test.run", "^TestFollowOneRequest$", "-test.count=1")
	cmd.Dir = filepath.Join(root, "core", "test")
	var trace bytes.Buffer
	cmd.Stderr = &trace // dlv writes the trace to stderr
	cmd.Stdout = os.Stdout
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dlv trace: %w\n%s", err, tail(trace.Bytes()))
	}
	return trace.Bytes(), nil
}

// follow replays the trace's calls and returns on the followed call's
// goroutine, from its entry to its return, and returns the files of core
// the path is in, one entry per move to another file.
func follow(r io.Reader, root string) ([]move, error) {
	core := filepath.Join(root, "core") + string(filepath.Separator)
	tests := filepath.Join(root, "core", "test") + string(filepath.Separator)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var (
		g       string  // the followed goroutine, once found
		stack   []frame // the calls in progress
		pending bool    // a call whose file is the next frame line
		seq     []move
		done    bool
	)
	at := func(call bool) {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1].file
		if f != "" && (len(seq) == 0 || seq[len(seq)-1].file != f) {
			seq = append(seq, move{f, call})
		}
	}
	for sc.Scan() && !done {
		line := ansi.ReplaceAllString(sc.Text(), "")
		if m := callRE.FindStringSubmatch(line); m != nil {
			if g == "" && strings.HasSuffix(m[2], followed) {
				g = m[1]
			}
			if g == "" || m[1] != g || !strings.HasPrefix(m[2], corePkg) {
				// a generic of the standard library instantiated with
				// core's types matches the tracepoints but reports no
				// return
				continue
			}
			stack = append(stack, frame{fn: m[2]})
			if verbose {
				fmt.Fprintf(os.Stderr, "%*s> %s\n", len(stack), "", m[2])
			}
			pending = true
			continue
		}
		if m := retRE.FindStringSubmatch(line); m != nil {
			if g == "" || m[1] != g {
				continue
			}
			if strings.HasSuffix(m[2], followed) {
				done = true
				break
			}
			// a function with deferred calls is reported returning twice,
			// before and after them: only the first return pops its call
			if verbose {
				fmt.Fprintf(os.Stderr, "%*s< %s (top %v)\n", len(stack), "", m[2], stack[len(stack)-1])
			}
			if len(stack) > 0 && stack[len(stack)-1].fn == m[2] {
				stack = stack[:len(stack)-1]
				at(false)
			}
			continue
		}
		if m := frameRE.FindStringSubmatch(line); m != nil && pending {
			pending = false
			f := m[1]
			if strings.HasPrefix(f, core) && !strings.HasPrefix(f, tests) {
				rel, _ := filepath.Rel(root, f)
				stack[len(stack)-1].file = filepath.ToSlash(rel)
			}
			at(true)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if g == "" || !done {
		return nil, fmt.Errorf("the trace has no complete call of %s", followed)
	}
	return seq, nil
}

// frame is a call in progress: its function, and its file when the file
// is one of core's ("" otherwise).
type frame struct{ fn, file string }

// move is the path moving to file: by a call, or by a return to its
// caller.
type move struct {
	file string
	call bool
}

// count returns how many distinct files seq holds, how many of its moves
// go back to a file it was in before, and how many of those are calls
// (the path handed back into a file it had left, not a callee's return).
func count(seq []move) (files, returns, calls int) {
	seen := map[string]bool{}
	for _, m := range seq {
		if seen[m.file] {
			returns++
			if m.call {
				calls++
			}
		}
		seen[m.file] = true
	}
	return len(seen), returns, calls
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "followpath:", err)
	os.Exit(1)
}
