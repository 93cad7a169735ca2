package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// heavy are module path prefixes a consumer of a published module must not
// get unless that module (or one of ours it requires) asks for them
// directly: test infrastructure, SQL drivers, metrics backends, frameworks.
var heavy = []string{
	"github.com/testcontainers/",
	"github.com/docker/",
	"github.com/moby/",
	"github.com/containerd/",
	"github.com/prometheus/",
	"github.com/jackc/pgx",
	"github.com/lib/pq",
	"modernc.org/sqlite",
	"github.com/mattn/go-sqlite3",
	"github.com/gin-gonic/gin",
	"github.com/labstack/echo",
	"github.com/gofiber/fiber",
	"google.golang.org/grpc",
}

// brings are the heavy modules a direct requirement brings along: a module that
// asks for testcontainers (the conformance suite's Redis harness) gets the
// Docker client and what it needs too.
var brings = map[string][]string{
	testInfra: {"github.com/docker/", "github.com/moby/", "github.com/containerd/", "google.golang.org/grpc"},
	// Envoy's API module names Prometheus' metric data model (protobuf
	// types only, not the client library)
	"github.com/envoyproxy/": {"github.com/prometheus/client_model"},
}

const testInfra = "github.com/testcontainers/"

// harness are the modules whose users may get test infrastructure: the
// conformance suite and its Redis harness are for tests. Any other module
// that asks for testcontainers fails the check, whatever its go.mod says.
var harness = []string{"conformance"}

// lean are the modules whose consumers get none of heavy at all, whatever
// their go.mod files say: a core-only or net/http user gets no SQL driver,
// framework, gRPC or test infrastructure.
var lean = []string{"core", "httplimit"}

// errSkip reports that a check could not run for a reason outside the
// tree (no module proxy reachable) where that is allowed (not under CI).
var errSkip = errors.New("skipped")

// ConsumerResult is what one consumer of a published module saw.
type ConsumerResult struct {
	Module   string   // directory of the published module
	Nodes    int      // distinct module@version nodes in go mod graph, the consumer excluded
	Paths    int      // distinct module paths among them
	Binaries []string // commands installed with go install and run with -h
}

// consumerEnv is the environment of a consumer outside the repository:
// no workspace, our modules from the proxy in proxyDir and the rest from
// the machine's module cache or the normal module proxy, checksums from
// the checksum database except for our (unpublished) versions.
func consumerEnv(proxyDir, work string) ([]string, error) {
	user, err := proxyLines(proxyDir)
	if err != nil {
		return nil, err
	}
	modcache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	goflags, err := goEnv("GOFLAGS")
	if err != nil {
		return nil, err
	}
	// the user's lines (README, "Trying it before a release"), and: what
	// this machine downloaded before, so the check does not download the
	// world each run (misses fall through)
	env := append(os.Environ(), user...)
	for i, kv := range env {
		if rest, ok := strings.CutPrefix(kv, "GOPROXY=file://"+filepath.ToSlash(proxyDir)); ok && modcache != "" {
			env[i] = "GOPROXY=file://" + filepath.ToSlash(proxyDir) + ",file://" + filepath.ToSlash(filepath.Join(modcache, "cache", "download")) + rest
		}
	}
	env = append(env,
		"GOFLAGS="+strings.TrimSpace(goflags+" -mod=mod -modcacherw -trimpath"),
		// a module cache of its own: a cached copy of an earlier build of
		// the same version must not stand in for the tree
		"GOMODCACHE="+filepath.Join(work, "modcache"),
		"GOBIN="+filepath.Join(work, "bin"),
		"GOTOOLCHAIN=local",
	)
	return env, nil
}

// proxyLines is the environment a user sets to go get our modules from the
// proxy in proxyDir before they are published: no workspace, our modules
// from the folder and every other one from the machine's module proxy, and
// no checksum-database lookup for our (unpublished) versions.
func proxyLines(proxyDir string) ([]string, error) {
	goproxy, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	chain := []string{"file://" + filepath.ToSlash(proxyDir)}
	if goproxy != "" && goproxy != "off" {
		chain = append(chain, goproxy)
	}
	return []string{
		"GOWORK=off",
		"GOPROXY=" + strings.Join(chain, ","),
		"GONOSUMDB=" + modulePrefix + "/*",
		"GOFLAGS=-mod=mod",
	}, nil
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// checkConsumers builds a module proxy from the tree at root (rev as for
// buildProxy) and, for each published module named in only (all if
// empty), plays a consumer in a fresh directory under work: go get the
// module at v.Version, build a program importing every package of it,
// assert its go mod graph holds no heavy module it does not ask for, and
// go install and run its commands.
func checkConsumers(ctx context.Context, root, work string, v *Versions, rev string, only []string, log io.Writer) ([]ConsumerResult, error) {
	proxyDir := filepath.Join(work, "proxy")
	if err := buildProxy(root, proxyDir, v, rev); err != nil {
		return nil, err
	}
	env, err := consumerEnv(proxyDir, work)
	if err != nil {
		return nil, err
	}
	defer cleanModCache(env, work)
	var results []ConsumerResult
	for _, m := range v.Modules {
		if len(only) > 0 && !slices.Contains(only, m) {
			continue
		}
		allowed, err := allowedHeavy(root, m, v)
		if err != nil {
			return results, err
		}
		r, err := checkConsumer(ctx, env, filepath.Join(work, "consumer-"+strings.ReplaceAll(m, "/", "-")), m, v.Version, allowed)
		if err != nil {
			return results, fmt.Errorf("consumer of %s@%s: %w", modulePath(m), v.Version, err)
		}
		fmt.Fprintf(log, "ok   %s@%s: go mod graph %d modules (%d paths)", modulePath(m), v.Version, r.Nodes, r.Paths)
		if len(r.Binaries) > 0 {
			fmt.Fprintf(log, "; installed and ran %s", strings.Join(r.Binaries, ", "))
		}
		fmt.Fprintln(log)
		results = append(results, r)
	}
	return results, nil
}

// cleanModCache empties the consumers' module cache (its files are made
// writable by -modcacherw, so os.RemoveAll works too).
func cleanModCache(env []string, work string) {
	cmd := exec.Command("go", "clean", "-modcache")
	cmd.Env = env
	cmd.Dir = work
	_ = cmd.Run()
}

// allowedHeavy lists the heavy prefixes module m asks for: those matched
// by a direct requirement of m or of a published module m requires.
func allowedHeavy(root, m string, v *Versions) ([]string, error) {
	if slices.Contains(lean, m) {
		return nil, nil
	}
	var allowed []string
	seen := map[string]bool{}
	var walk func(dir string) error
	walk = func(dir string) error {
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		p := filepath.Join(root, dir, "go.mod")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.ParseLax(p, b, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if ours(r.Mod.Path) && v.published(r.Mod.Path) {
				if err := walk(strings.TrimPrefix(r.Mod.Path, modulePrefix+"/")); err != nil {
					return err
				}
				continue
			}
			if r.Indirect {
				continue
			}
			for _, h := range heavy {
				if h == testInfra && !slices.Contains(harness, m) {
					continue
				}
				if strings.HasPrefix(r.Mod.Path, h) {
					allowed = appendNew(allowed, h)
				}
			}
			for k, b := range brings {
				if k == testInfra && !slices.Contains(harness, m) {
					continue
				}
				if strings.HasPrefix(r.Mod.Path, k) {
					allowed = appendNew(allowed, b...)
				}
			}
		}
		return nil
	}
	return allowed, walk(m)
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func checkConsumer(ctx context.Context, env []string, dir, m, version string, allowed []string) (ConsumerResult, error) {
	r := ConsumerResult{Module: m}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	run := func(args ...string) ([]byte, error) { return goCmd(ctx, env, dir, args...) }
	if _, err := run("mod", "init", "example.com/consumer"); err != nil {
		return r, err
	}
	mp := modulePath(m)
	if _, err := run("get", mp+"@"+version); err != nil {
		return r, err
	}
	out, err := run("list", "-f", "{{.Name}} {{.ImportPath}}", mp+"/...")
	if err != nil {
		return r, err
	}
	var libs, cmds []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, path, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(path+"/", "/internal/") {
			continue
		}
		if name == "main" {
			cmds = append(cmds, path)
		} else {
			libs = append(libs, path)
		}
	}
	if len(libs)+len(cmds) == 0 {
		return r, fmt.Errorf("go list %s/... found no package", mp)
	}
	if len(libs) > 0 {
		var src strings.Builder
		src.WriteString("// A consumer of " + mp + ": it imports every package.\npackage main\n\nimport (\n")
		for _, l := range libs {
			fmt.Fprintf(&src, "\t_ %q\n", l)
		}
		src.WriteString(")\n\nfunc main() {}\n")
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
			return r, err
		}
		if _, err := run("mod", "tidy"); err != nil {
			return r, err
		}
		if _, err := run("build", "-o", os.DevNull, "."); err != nil {
			return r, err
		}
	}
	graph, err := run("mod", "graph")
	if err != nil {
		return r, err
	}
	nodes := map[string]bool{}
	paths := map[string]bool{}
	for _, line := range strings.Split(string(graph), "\n") {
		for _, n := range strings.Fields(line) {
			path, _, ok := strings.Cut(n, "@")
			if !ok { // the consumer itself
				continue
			}
			nodes[n] = true
			paths[path] = true
		}
	}
	r.Nodes, r.Paths = len(nodes), len(paths)
	var bad []string
	for p := range paths {
		isHeavy := slices.ContainsFunc(heavy, func(h string) bool { return strings.HasPrefix(p, h) })
		isAllowed := slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(p, a) })
		if isHeavy && !isAllowed {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return r, fmt.Errorf("its go mod graph (%d modules, %d paths) holds %s, which %s does not ask for (go mod why -m in %s says why)", r.Nodes, r.Paths, strings.Join(bad, ", "), mp, dir)
	}
	for _, c := range cmds {
		if _, err := run("install", c+"@"+version); err != nil {
			return r, err
		}
		bin := filepath.Join(envValue(env, "GOBIN"), filepath.Base(c))
		cmd := exec.CommandContext(ctx, bin, "-h")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return r, fmt.Errorf("%s -h: %v\n%s", bin, err, out)
		}
		r.Binaries = append(r.Binaries, filepath.Base(c))
	}
	return r, nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// networkTrouble are messages of a go command that could not reach a
// module proxy or checksum database.
var networkTrouble = []string{
	"dial tcp", "no such host", "connection refused", "i/o timeout",
	"TLS handshake timeout", "network is unreachable", "temporary failure in name resolution",
}

// goCmd runs the go command in dir. A failure to reach the network is
// errSkip, unless CI=true, where it is a failure like any other.
func goCmd(ctx context.Context, env []string, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if os.Getenv("RELEASE_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "  %s: go %s (%.1fs)\n", dir, strings.Join(args, " "), time.Since(start).Seconds())
	}
	if err == nil {
		return out, nil
	}
	msg := strings.TrimSpace(stderr.String())
	if os.Getenv("CI") != "true" {
		for _, t := range networkTrouble {
			if strings.Contains(strings.ToLower(msg), strings.ToLower(t)) {
				return nil, fmt.Errorf("%w: no module proxy reachable: go %s: %s", errSkip, strings.Join(args, " "), msg)
			}
		}
	}
	return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
}
