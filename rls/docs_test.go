package rls_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/rls"
)

// yamlBlock is a fenced YAML block of a Markdown page.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocsRateLimitFilesLoad: every envoyproxy/ratelimit configuration
// docs/envoy.md shows (a YAML block with a top-level domain), and the
// sample file it points a newcomer to, loads as RLS_CONFIG loads it.
func TestDocsRateLimitFilesLoad(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range yamlBlock.FindAllSubmatch(doc, -1) {
		block := string(m[1])
		if !strings.HasPrefix(block, "domain:") && !strings.Contains(block, "\ndomain:") {
			continue // Envoy's own configuration
		}
		n++
		if _, err := rls.ParseConfig("docs/envoy.md", []byte(block)); err != nil {
			t.Errorf("a configuration docs/envoy.md shows does not load: %v\n%s", err, block)
		}
	}
	if n == 0 {
		t.Fatal("docs/envoy.md shows no envoyproxy/ratelimit configuration")
	}
	for _, f := range []string{"testdata/readme.yaml", "cmd/tollgate-rls/testdata/ratelimit.yaml"} {
		if _, err := rls.LoadConfig(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
