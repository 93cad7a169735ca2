package conformance

import (
	"bufio"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// A transcript is what a scenario saw, as plain text: notes ("~ ...": clock
// steps, handler call counts, Redis keys) and exchanges ("> request", then
// "< status", "< Header: value" and "< body ..." lines).

type entry struct {
	note    string // set for a note
	request string // set for an exchange
	status  int
	headers [][2]string
	body    string
	head    bool // the request was a HEAD: its response has no content
}

type transcript struct {
	mu      sync.Mutex
	entries []entry
}

func (tr *transcript) add(e entry) {
	tr.mu.Lock()
	tr.entries = append(tr.entries, e)
	tr.mu.Unlock()
}

// render writes entries as text, keeping what proto compares.
func render(entries []entry, proto Protocol) string {
	var b strings.Builder
	for _, e := range entries {
		if e.note != "" {
			b.WriteString("~ " + e.note + "\n")
			continue
		}
		b.WriteString("> " + e.request + "\n")
		fmt.Fprintf(&b, "< %d\n", e.status)
		for _, h := range e.headers {
			if proto == ProtocolGRPC && !containsFold(grpcHeaders, h[0]) {
				continue
			}
			b.WriteString("< " + h[0] + ": " + h[1] + "\n")
		}
		if proto == ProtocolHTTP && e.body != "" {
			b.WriteString("< body " + e.body + "\n")
		}
	}
	return b.String()
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// parse reads a transcript written by render(..., ProtocolHTTP).
func parse(text string) ([]entry, error) {
	var es []entry
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "~ "):
			es = append(es, entry{note: l[2:]})
		case strings.HasPrefix(l, "> "):
			es = append(es, entry{request: l[2:]})
		case strings.HasPrefix(l, "< ") && len(es) > 0 && es[len(es)-1].request != "":
			e := &es[len(es)-1]
			v := l[2:]
			switch {
			case strings.HasPrefix(v, "body "):
				e.body = v[5:]
			case e.status == 0:
				s, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("line %d: bad status %q", line, v)
				}
				e.status = s
			default:
				name, value, ok := strings.Cut(v, ": ")
				if !ok {
					return nil, fmt.Errorf("line %d: bad header %q", line, v)
				}
				e.headers = append(e.headers, [2]string{name, value})
			}
		default:
			return nil, fmt.Errorf("line %d: cannot parse %q", line, l)
		}
	}
	return es, sc.Err()
}

//go:embed testdata/*.golden
var goldenFS embed.FS

// updateGolden makes the suite write the transcripts it sees as the new
// golden files (set by the package's own tests' -update flag).
var updateGolden bool

var goldenWrite sync.Mutex

const goldenHeader = "# Golden transcript of a conformance scenario: the same for every adapter.\n" +
	"# Regenerate with: cd conformance && go test ./ -run TestGolden -update\n"

func goldenName(scenario string) string { return "testdata/" + scenario + ".golden" }

// checkGolden compares got with the scenario's golden transcript, or
// writes it under -update. It returns a message describing a difference,
// or "".
func checkGolden(scenario string, got []entry, proto Protocol) string {
	if updateGolden && proto == ProtocolHTTP {
		goldenWrite.Lock()
		defer goldenWrite.Unlock()
		name := goldenName(scenario)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err.Error()
		}
		if err := os.WriteFile(name, []byte(goldenHeader+render(got, ProtocolHTTP)), 0o644); err != nil {
			return err.Error()
		}
		return ""
	}
	raw, err := goldenFS.ReadFile(goldenName(scenario))
	if err != nil {
		return fmt.Sprintf("no golden transcript %s (regenerate: cd conformance && go test ./ -run TestGolden -update): %v", goldenName(scenario), err)
	}
	want, err := parse(string(raw))
	if err != nil {
		return fmt.Sprintf("golden %s: %v", goldenName(scenario), err)
	}
	w, g := render(want, proto), render(got, proto)
	if w == g {
		return ""
	}
	return fmt.Sprintf("transcript differs from %s (%s comparison)\n%s\n--- want\n%s--- got\n%s", goldenName(scenario), proto, firstDiff(w, g), w, g)
}

// firstDiff names the first line where want and got differ.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var a, b string
		if i < len(wl) {
			a = wl[i]
		}
		if i < len(gl) {
			b = gl[i]
		}
		if a != b {
			return fmt.Sprintf("first difference at line %d:\n  want %q\n  got  %q", i+1, a, b)
		}
	}
	return ""
}
