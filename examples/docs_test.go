package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]*)\)`)
	mdHeading = regexp.MustCompile("(?m)^#{1,6} +(.+?) *$")
	mdFence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchors returns the heading anchors of a Markdown page as GitHub makes
// them: lower case, punctuation dropped, spaces as hyphens, a repeated
// heading numbered -1, -2, ...
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(page, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		for n, base := 1, a; out[a]; n++ {
			a = base + "-" + itoa(n)
		}
		out[a] = true
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestDocsAnchorsResolve: every link to a heading (#anchor) in README.md
// and docs/*.md, on the same page or another, names a heading that page
// has.
func TestDocsAnchorsResolve(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "../CHANGELOG.md")
	read := map[string]string{}
	load := func(p string) (string, bool) {
		if s, ok := read[p]; ok {
			return s, true
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", false
		}
		read[p] = string(b)
		return read[p], true
	}
	checked := 0
	for _, p := range pages {
		page, ok := load(p)
		if !ok {
			t.Fatalf("read %s", p)
		}
		for _, m := range mdLink.FindAllStringSubmatch(mdFence.ReplaceAllString(page, ""), -1) {
			target, anchor, ok := strings.Cut(m[1], "#")
			if !ok || strings.Contains(target, "://") || anchor == "" {
				continue
			}
			file := p
			if target != "" {
				if !strings.HasSuffix(target, ".md") {
					continue
				}
				file = filepath.Join(filepath.Dir(p), target)
			}
			other, ok := load(file)
			if !ok {
				t.Errorf("%s: link %s: no page %s", p, m[1], file)
				continue
			}
			checked++
			if !anchors(other)[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", p, m[1], file, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no anchor link checked")
	}
}
