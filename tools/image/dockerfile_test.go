package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildLine is a Dockerfile's build step: RUN cd DIR && ENV... go build ... -o /out/NAME PKG.
var buildLine = regexp.MustCompile(`^RUN (cd \S+ && .*go build .*-o )/out/(\S+)( .*)$`)

// TestDockerfilesBuild runs each Dockerfile's build step on the tree as
// `COPY . .` gives it to the build stage, so a Dockerfile that cannot build
// (a module without the replace lines GOWORK=off needs, a moved package)
// fails here, where no Docker daemon runs.
func TestDockerfilesBuild(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range []string{"rls/cmd/tollgate-rls/Dockerfile", "examples/Dockerfile"} {
		t.Run(df, func(t *testing.T) {
			f, err := os.Open(filepath.Join(root, df))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var steps int
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				m := buildLine.FindStringSubmatch(sc.Text())
				if m == nil {
					continue
				}
				steps++
				out := t.TempDir()
				// the ARG default the Dockerfile names
				cmdline := strings.ReplaceAll(m[1]+out+"/"+m[2]+m[3], "${EXAMPLE}", "nethttp")
				cmd := exec.Command("sh", "-c", cmdline)
				cmd.Dir = root
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", cmdline, err, b)
				}
			}
			if steps == 0 {
				t.Fatalf("%s: no build step (RUN cd DIR && ... go build ... -o /out/NAME ...)", df)
			}
		})
	}
}
