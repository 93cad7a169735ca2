package conformance

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/redistest"
)

// Run runs every scenario against target, each as a named subtest, on a
// standalone Redis and on a Redis Cluster (see the package documentation).
func Run(t *testing.T, target Target) {
	t.Helper()
	if target == nil {
		t.Fatal("conformance: nil Target")
	}
	switch target.Protocol() {
	case ProtocolHTTP, ProtocolGRPC:
	default:
		t.Fatalf("conformance: unknown protocol %d", target.Protocol())
	}
	runScenarios(t, target)
}

// envBackends, in a child process of this package's tests or of
// RunFailing, restricts the backends scenarios run on (comma-separated
// names).
const envBackends = "CONFORMANCE_BACKENDS"

// envFailing names, in RunFailing's child process, the test whose wrong
// target the child runs the suite against.
const envFailing = "CONFORMANCE_RUN_FAILING"

// failingTimeout bounds RunFailing's child process.
const failingTimeout = 5 * time.Minute

// RunFailing runs the suite against a deliberately wrong target and passes
// only if the target fails at least the named scenarios. It proves that a
// target's service can fail the suite: that the adapter's answers reach
// the comparisons, and that a realistic mistake in the framework's idiom is
// caught.
//
// The suite runs in a child process (this test binary, re-run for this
// test alone, on the standalone Redis only) so that the expected failures
// do not fail the calling test. The test binary's TestMain must run the
// tests as usual ([Main] does).
func RunFailing(t *testing.T, target Target, scenarios ...string) {
	t.Helper()
	if os.Getenv(envFailing) == t.Name() {
		if b := os.Getenv(envBackends); b != "" {
			onlyBackends = strings.Split(b, ",")
		}
		Run(t, target)
		return
	}
	if len(scenarios) == 0 {
		t.Fatal("conformance: RunFailing needs the scenarios the target must fail")
	}
	var run []string
	for _, name := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(name)+"$")
	}
	ctx, cancel := context.WithTimeout(t.Context(), failingTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envFailing+"="+t.Name(), "REDIS_URL="+redistest.URL(t), envBackends+"=standalone")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Fatalf("conformance: the suite passed the wrong target:\n%s", out)
	case !errors.As(err, &exit) || ctx.Err() != nil:
		t.Fatalf("conformance: running the suite against the wrong target: %v\n%s", err, out)
	}
	var failed []string
	for _, m := range regexp.MustCompile(`--- FAIL: `+regexp.QuoteMeta(t.Name())+`/([^/\s]+)/`).FindAllSubmatch(out, -1) {
		failed = append(failed, string(m[1]))
	}
	for _, s := range scenarios {
		if !slices.Contains(failed, s) {
			t.Errorf("conformance: the wrong target passed scenario %q", s)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}
