package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/99designs/gqlgen",
	"github.com/vektah/gqlparser",
	"connectrpc.com/",
}

// brings are the heavy modules a direct requirement brings along.
var brings = map[string][]string{
	// Envoy's API module names Prometheus' metric data model (protobuf
	// types only, not the client library)
	"github.com/envoyproxy/": {"github.com/prometheus/client_model"},
}

// testInfra is test infrastructure no published module may bring, whatever
// its go.mod says: the published modules' own tests (the conformance suite
// and its Redis harness included) run on a real Redis from REDIS_URL or
// redis-server, and they are in every adapter's module graph.
const testInfra = "github.com/testcontainers/"

// lean are the modules whose consumers get none of heavy at all, whatever
// their go.mod files say: a core-only, net/http or RPC-plumbing user gets no SQL driver,
// framework, gRPC or test infrastructure.
var lean = []string{"core", "httplimit", "rpcadapt"}

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

// The README's section "Trying it before a release" holds the lines a user
// runs to go get our modules before they are published. The consumer check
// runs exactly those lines, so they cannot drift from what it checks: the
// fenced sh block of that section, whose first command is
// `make proxy DIR=<folder>`, and whose other lines go get one published
// module at the version versions.yaml names.
const (
	readmeFile    = "README.md"
	readmeSection = "## Trying it before a release"
)

// tryLines are the README's lines for trying the modules before a release.
type tryLines struct {
	dir     string   // the folder its `make proxy DIR=` line names
	script  []string // the lines after that one, for sh in an empty folder outside the repository
	modules []string // module paths its go get lines name
}

// readTryLines reads the README's lines for trying the modules before a
// release and checks their shape against versions.yaml.
func readTryLines(root string, v *Versions) (tryLines, error) {
	var tl tryLines
	b, err := os.ReadFile(filepath.Join(root, readmeFile))
	if err != nil {
		return tl, err
	}
	where := fmt.Sprintf("%s, %q", readmeFile, strings.TrimPrefix(readmeSection, "## "))
	_, section, ok := strings.Cut(string(b), "\n"+readmeSection+"\n")
	if !ok {
		return tl, fmt.Errorf("%s: no such section", where)
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		return tl, fmt.Errorf("%s: no ```sh block", where)
	}
	block, _, ok = strings.Cut(block, "\n```")
	if !ok {
		return tl, fmt.Errorf("%s: the ```sh block does not end", where)
	}
	for _, line := range strings.Split(block, "\n") {
		cmd := strings.TrimSpace(line)
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			tl.script = append(tl.script, line)
			continue
		}
		if tl.dir == "" {
			dir, ok := strings.CutPrefix(cmd, "make proxy DIR=")
			if !ok || dir == "" || strings.ContainsAny(dir, " \t#'\"$") {
				return tl, fmt.Errorf("%s: the first command is %q, want make proxy DIR=<folder>", where, cmd)
			}
			tl.dir = dir
			tl.script = nil
			continue
		}
		tl.script = append(tl.script, line)
		if rest, ok := strings.CutPrefix(cmd, "go get "); ok {
			for _, arg := range strings.Fields(rest) {
				if strings.HasPrefix(arg, "#") {
					break
				}
				path, version, _ := strings.Cut(arg, "@")
				if !ours(path) || !v.published(path) || version != v.Version {
					return tl, fmt.Errorf("%s: go get %s, want a published module at %s (versions.yaml)", where, arg, v.Version)
				}
				tl.modules = append(tl.modules, path)
			}
		}
	}
	if tl.dir == "" || len(tl.modules) == 0 {
		return tl, fmt.Errorf("%s: the ```sh block needs a make proxy DIR=<folder> line, then a go get of a published module", where)
	}
	return tl, nil
}

// forProxy is the script with the README's folder replaced by proxyDir.
func (tl tryLines) forProxy(proxyDir string) string {
	return strings.ReplaceAll(strings.Join(tl.script, "\n"), tl.dir, filepath.ToSlash(proxyDir)) + "\n"
}

// runTryLines plays the README's user: the lines after `make proxy`, run
// by sh -eu in an empty folder dir outside the repository, with the
// proxy at proxyDir in place of the README's folder. It returns the
// environment they leave (what they exported), in which every other
// consumer then runs. base is the environment they start from.
func runTryLines(ctx context.Context, tl tryLines, proxyDir, dir string, base []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dump := filepath.Join(dir, ".env")
	cmd := exec.CommandContext(ctx, "sh", "-eu", "-c", tl.forProxy(proxyDir)+"env -0 > \"$TOLLGATE_TRY_ENV\"\n")
	cmd.Dir = dir
	cmd.Env = append(slices.Clip(base), "TOLLGATE_TRY_ENV="+dump)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, commandError(fmt.Sprintf("the README's lines (%s, %q) in %s", readmeFile, strings.TrimPrefix(readmeSection, "## "), dir), err, string(out))
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range strings.Split(string(b), "\x00") {
		if kv != "" && !strings.HasPrefix(kv, "TOLLGATE_TRY_ENV=") {
			env = append(env, kv)
		}
	}
	for _, m := range tl.modules {
		if _, err := goCmd(ctx, env, dir, "list", "-m", m); err != nil {
			return nil, fmt.Errorf("after the README's lines: %w", err)
		}
	}
	return env, nil
}

// consumerBase is the environment the README's lines start from: the
// user's, outside any workspace, with this check's module cache and bin
// folder and the local toolchain. Its GOPROXY puts this machine's module
// cache in front of the usual proxies (misses fall through), so a line
// that extends the user's GOPROXY (go env GOPROXY) does not download again
// what this machine already has. -trimpath makes the builds independent of
// the module cache's folder, so the build cache serves every run after the
// first.
func consumerBase(modcache, bin string) ([]string, error) {
	machineCache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	goproxy, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	goflags, err := goEnv("GOFLAGS")
	if err != nil {
		return nil, err
	}
	if machineCache != "" && goproxy != "off" {
		local := "file://" + filepath.ToSlash(filepath.Join(machineCache, "cache", "download"))
		goproxy = strings.TrimSuffix(local+","+goproxy, ",")
	}
	// the go command indexes a module cache's packages once per module
	// version, in its build cache, assuming a version's files never change;
	// ours do between runs (the tree at the same version), and a stale
	// index names files that are gone: no index for the check's builds
	godebug := "goindex=0"
	if g := os.Getenv("GODEBUG"); g != "" {
		godebug = g + "," + godebug
	}
	return append(os.Environ(),
		"GODEBUG="+godebug,
		"GOWORK=off",
		"GOPROXY="+goproxy,
		"GOFLAGS="+strings.TrimSpace(goflags+" -trimpath"),
		"GOMODCACHE="+modcache,
		"GOBIN="+bin,
		"GOTOOLCHAIN=local",
	), nil
}

// consumerCache is the check's own module cache, kept between runs so a
// rerun does not unpack every dependency again: one for every checkout of
// the repository (so the disk holds one), used by one check at a time
// (the lock, held until unlock). Before each run it loses every copy of
// our modules it holds: a copy of an earlier tree at the same version must
// not stand in for this one.
func consumerCache(log io.Writer) (dir string, unlock func(), err error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	base = filepath.Join(base, "tollgate-consumer")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", nil, err
	}
	lock := filepath.Join(base, "lock")
	fmt.Fprintf(log, "module cache %s (waiting for the lock %s if another check holds it)\n", filepath.Join(base, "modcache"), lock)
	unlock, err = lockFile(lock)
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(base, "modcache")
	for _, ourCopies := range []string{
		filepath.Join(dir, filepath.FromSlash(modulePrefix)),
		filepath.Join(dir, "cache", "download", filepath.FromSlash(modulePrefix)),
	} {
		if err := removeAll(ourCopies); err != nil {
			unlock()
			return "", nil, err
		}
	}
	return dir, unlock, nil
}

// removeAll removes a folder of the module cache, whose files and folders
// the go command makes read-only.
func removeAll(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// checkConsumers builds a module proxy from the tree at root (rev as for
// buildProxy), runs the README's lines for trying the modules before a
// release against it (runTryLines) and, in the environment they leave, for
// each published module named in only (all if empty), plays a consumer in
// a fresh directory under work: go get the module at v.Version, build a
// program importing every package of it, assert its go mod graph holds no
// heavy module it does not ask for, and go install and run its commands.
func checkConsumers(ctx context.Context, root, work string, v *Versions, rev string, only []string, log io.Writer) ([]ConsumerResult, error) {
	tl, err := readTryLines(root, v)
	if err != nil {
		return nil, err
	}
	proxyDir := filepath.Join(work, "proxy")
	if err := buildProxy(root, proxyDir, v, rev); err != nil {
		return nil, err
	}
	modcache, unlock, err := consumerCache(log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	base, err := consumerBase(modcache, filepath.Join(work, "bin"))
	if err != nil {
		return nil, err
	}
	env, err := runTryLines(ctx, tl, proxyDir, filepath.Join(work, "readme"), base)
	if err != nil {
		return nil, err
	}
	// the README's lines may set GOFLAGS: the check's flags go on top.
	// -mod=mod lets go list and go build of every package record the
	// checksums go get did not need for the module's root package
	env = append(env, "GOFLAGS="+strings.TrimSpace(envValue(env, "GOFLAGS")+" -mod=mod -trimpath"))
	fmt.Fprintf(log, "ok   %s, %q: %s\n", readmeFile, strings.TrimPrefix(readmeSection, "## "), strings.Join(tl.modules, ", "))
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
				if h == testInfra {
					continue
				}
				if strings.HasPrefix(r.Mod.Path, h) {
					allowed = appendNew(allowed, h)
				}
			}
			for k, b := range brings {
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
	listed := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, path, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		listed++
		// a user cannot import an internal package: the internal module's
		// packages are all internal, so its consumer only checks its graph
		if strings.Contains(path+"/", "/internal/") {
			continue
		}
		if name == "main" {
			cmds = append(cmds, path)
		} else {
			libs = append(libs, path)
		}
	}
	if listed == 0 {
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
	return nil, commandError("go "+strings.Join(args, " "), err, stderr.String())
}

// commandError is the failure of a command (what) with its output. A
// failure to reach the network is errSkip, unless CI=true, where it is a
// failure like any other.
func commandError(what string, err error, output string) error {
	msg := strings.TrimSpace(output)
	if os.Getenv("CI") != "true" {
		for _, t := range networkTrouble {
			if strings.Contains(strings.ToLower(msg), strings.ToLower(t)) {
				return fmt.Errorf("%w: no module proxy reachable: %s: %s", errSkip, what, msg)
			}
		}
	}
	return fmt.Errorf("%s: %v\n%s", what, err, msg)
}
