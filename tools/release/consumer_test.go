package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The README's lines for trying the modules before a release are the ones
// the consumer check runs: they parse, name the folder make proxy writes,
// and go get a published module at versions.yaml's version.
func TestReadmeTryLines(t *testing.T) {
	root := filepath.Join("..", "..")
	v, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := readTryLines(root, v)
	if err != nil {
		t.Fatal(err)
	}
	script := tl.forProxy("/elsewhere/proxy")
	for _, want := range []string{
		"GOPROXY=file:///elsewhere/proxy,",
		"GONOSUMDB=" + modulePrefix,
		"go get " + modulePrefix + "/ginlimit@" + v.Version,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the README's lines, for a proxy in /elsewhere/proxy, lack %q:\n%s", want, script)
		}
	}
	if strings.Contains(script, tl.dir) {
		t.Errorf("the README's folder %s is left in the lines:\n%s", tl.dir, script)
	}
}

// A README whose lines the check could not run as a user would is refused,
// saying what is wrong, rather than checked loosely.
func TestReadmeTryLinesRefused(t *testing.T) {
	v := &Versions{Version: "v0.2.0", Modules: []string{"core", "ginlimit"}}
	for _, c := range []struct{ name, block, want string }{
		{"no make proxy first", "go get github.com/tollgate-go/tollgate/ginlimit@v0.2.0", "want make proxy DIR="},
		{"another version", "make proxy DIR=/tmp/p\ngo get github.com/tollgate-go/tollgate/ginlimit@v0.1.0", "versions.yaml"},
		{"unpublished module", "make proxy DIR=/tmp/p\ngo get github.com/tollgate-go/tollgate/examples@v0.2.0", "published module"},
		{"no go get", "make proxy DIR=/tmp/p\nexport GONOSUMDB=x", "then a go get"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			readme := "# x\n\n" + readmeSection + "\n\ntext\n\n```sh\n" + c.block + "\n```\n\n## Next\n"
			if err := os.WriteFile(filepath.Join(root, readmeFile), []byte(readme), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := readTryLines(root, v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("readTryLines: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// A published module may ask for a framework or gRPC, and gets what one of
// ours it requires asks for; no module may ask for test infrastructure
// (testcontainers and the Docker client it brings), the conformance
// suite included, and a lean module gets nothing.
func TestAllowedHeavy(t *testing.T) {
	root := t.TempDir()
	mods := map[string]string{
		"core":        "",
		"conformance": "\tgithub.com/testcontainers/testcontainers-go v0.45.0\n\tgithub.com/tollgate-go/tollgate/core v0.3.0\n",
		"ginlimit":    "\tgithub.com/gin-gonic/gin v1.12.0\n\tgithub.com/tollgate-go/tollgate/conformance v0.3.0\n",
		"grpclimit":   "\tgoogle.golang.org/grpc v1.85.0\n\tgithub.com/docker/docker v28.0.0+incompatible // indirect\n",
		"httplimit":   "\tgithub.com/gin-gonic/gin v1.12.0\n",
	}
	v := &Versions{Version: "v0.3.0"}
	for dir, req := range mods {
		v.Modules = append(v.Modules, dir)
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		gomod := "module " + modulePath(dir) + "\n\ngo 1.26.0\n\nrequire (\n" + req + ")\n"
		if err := os.WriteFile(filepath.Join(root, dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for m, want := range map[string][]string{
		"core":        nil,
		"conformance": nil,
		"ginlimit":    {"github.com/gin-gonic/gin"},
		"grpclimit":   {"google.golang.org/grpc"},
		"httplimit":   nil,
	} {
		got, err := allowedHeavy(root, m, v)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: allowed %q, want %q", m, got, want)
		}
	}
}
