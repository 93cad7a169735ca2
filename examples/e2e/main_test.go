package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/testkit"

	"github.com/tollgate-go/tollgate/examples"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// secret is the HS256 secret every process of these tests is started with,
// and mint signs with.
const secret = "e2e-secret-0123456789abcdef-0123"

// commands are the example commands the tests build, as packages of the
// examples module; each binary is named after the last element.
var commands = []string{"./nethttp", "./gin", "./echo", "./echov5", "./fiber", "./fiberv3", "./grpc", "./cmd/mint"}

// Timeouts for a real process on a busy two-core machine (race-built
// binaries start slower).
const (
	startWithin = 45 * time.Second
	stopWithin  = 5 * time.Second
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperRole); role != "" {
		// this binary started again as a helper service (startHelper)
		os.Exit(runHelper(role))
	}
	code := redistest.RunChecked(m)
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds every example command once per test binary (the first
// test that needs them pays; `-run TestMakeDemo` builds nothing) and returns
// the folder holding them.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		binDir, buildErr = build()
		t.Logf("built %d example binaries (race %v) in %v", len(commands), raceEnabled, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func build() (string, error) {
	dir, err := os.MkdirTemp("", "tollgate-e2e-")
	if err != nil {
		return "", err
	}
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, commands...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".." // the examples module
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir, nil
}

// process is one example service running as an OS process.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *testkit.LogBuffer // the process's output, read while it runs
	done chan struct{}      // closed when the process has exited and been waited for
	err  error              // Wait's result, once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ownEnv are the variables the tests set for a service; whatever the
// caller's environment holds for them is dropped.
var ownEnv = []string{"ADDR", "REDIS_URL", "DATABASE_URL", "TOLLGATE_CONFIG", "TOLLGATE_JWT_SECRET", "TOLLGATE_DEMO", "METRICS_ADDR"}

func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := raceEnabled && k == "GORACE"
		for _, o := range ownEnv {
			drop = drop || k == o
		}
		if !drop {
			env = append(env, kv)
		}
	}
	if raceEnabled {
		// A race-built binary sleeps a second at exit for late reports by
		// default; these processes exit often (mint, SIGTERM).
		env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return append(env, extra...)
}

var (
	prefixOnce sync.Once
	keyPrefix  string
)

// testPrefix is the key prefix of every service the tests start: one per
// test binary (keys of the services' tenants, named in the tests as
// bucketKey does), never the production prefix a service defaults to in
// the shared Redis.
func testPrefix(t *testing.T) string {
	prefixOnce.Do(func() { keyPrefix = redistest.Prefix(t) })
	return keyPrefix
}

// ownPrefix returns env with its tier file (TOLLGATE_CONFIG, or the
// examples' default when unset) given the tests' key prefix, unless the
// file sets one itself.
func ownPrefix(t *testing.T, env []string) []string {
	t.Helper()
	cfg, at := examples.DefaultConfig, -1
	for i, kv := range env {
		if path, ok := strings.CutPrefix(kv, "TOLLGATE_CONFIG="); ok {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("tier file: %v", err)
			}
			cfg, at = b, i
		}
	}
	if bytes.Contains(cfg, []byte("\nkey_prefix:")) {
		return env
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	b := append(append(bytes.TrimRight(bytes.Clone(cfg), "\n"), "\nkey_prefix: "...), testPrefix(t)+"\n"...)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	env = slices.Clone(env)
	if at < 0 {
		return append(env, "TOLLGATE_CONFIG="+path)
	}
	env[at] = "TOLLGATE_CONFIG=" + path
	return env
}

// start runs the built example name with env added to the environment. It
// never outlives the test: the cleanup kills it if the test did not stop
// it, and logs its output when the test failed.
func start(t *testing.T, name string, env ...string) *process {
	t.Helper()
	return startCmd(t, name, exec.Command(filepath.Join(binaries(t), name)), env...)
}

// startHelper runs this test binary again as the helper service role
// (runHelper), with env added to the environment, as start does an example.
func startHelper(t *testing.T, role string, env ...string) *process {
	t.Helper()
	return startCmd(t, "helper "+role, exec.Command(os.Args[0], "-test.run=^$"), append(env, helperRole+"="+role)...)
}

func startCmd(t *testing.T, name string, cmd *exec.Cmd, env ...string) *process {
	t.Helper()
	p := &process{name: name, out: &testkit.LogBuffer{}, done: make(chan struct{}), cmd: cmd}
	p.cmd.Env = environ(ownPrefix(t, env)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = time.Second
	// Should the test binary itself die (a -timeout panic skips cleanups),
	// the kernel kills the service with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// freeAddr returns a loopback address whose port is free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// waitHealthy polls url (a /healthz) until it answers 200, failing at once
// if the process exits first.
func waitHealthy(t *testing.T, p *process, url string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(startWithin)
	for {
		if p.exited() {
			t.Fatalf("%s exited before %s answered (%v):\n%s", p.name, url, p.err, p.out.String())
		}
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 within %v (last: %v)", p.name, url, startWithin, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and requires a clean exit, status 0, within
// stopWithin, and no data race report.
func stop(t *testing.T, p *process) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited before SIGTERM (%v)", p.name, p.err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(stopWithin):
		t.Fatalf("%s did not exit within %v of SIGTERM", p.name, stopWithin)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
	case errors.As(p.err, &ee):
		t.Errorf("%s exited with status %d after SIGTERM, want 0", p.name, ee.ExitCode())
	default:
		t.Errorf("%s: %v", p.name, p.err)
	}
	if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
		t.Errorf("%s reported a data race", p.name)
	}
}

// mint runs the built mint command and returns the token it prints.
func mint(t *testing.T, key, tenant, tier string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "mint"), "-tenant", tenant, "-tier", tier)
	cmd.Env = environ("TOLLGATE_JWT_SECRET=" + key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mint -tenant %s -tier %s: %v\n%s", tenant, tier, err, stderr.String())
	}
	tok := strings.TrimSpace(string(out))
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("mint printed %q, want a JWT", out)
	}
	return tok
}

// tenantID returns a tenant ID no other run uses: the services share the
// harness's Redis with their default key prefix (the examples read none
// from the environment), so runs are kept apart by tenant.
func tenantID(t *testing.T, what string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "e2e-" + what + "-" + hex.EncodeToString(b[:])
}
