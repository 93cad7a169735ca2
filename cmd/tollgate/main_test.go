package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", to write a bad row by hand
)

// bin is the tollgate binary built from cmd/tollgate for the tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tollgate-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "tollgate")
	build := exec.Command("go", "build", "-o", bin, ".") // this package
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tollgate: %v\n%s", err, out)
		os.Exit(1)
	}
	code := redistest.RunChecked(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// tollgate runs the binary with a clean environment plus env.
func tollgate(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run tollgate %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func (r result) check(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, stdout) {
		t.Errorf("stdout does not contain %q:\n%s", stdout, r.stdout)
	}
	if !strings.Contains(r.stderr, stderr) {
		t.Errorf("stderr does not contain %q:\n%s", stderr, r.stderr)
	}
}

const tiersYAML = `default_tier: free
tiers:
  free:
    ceiling: {capacity: 100, refill_per_second: 1}
    classes:
      default: {capacity: 20, refill_per_second: 0.01}
      export: {capacity: 10, refill_per_second: 0.1}
  pro:
    classes:
      default: {capacity: 200, refill_per_second: 50}
      export: {capacity: 50, refill_per_second: 1}
`

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUsageAndHelp(t *testing.T) {
	cfg := writeTemp(t, "tiers.yaml", tiersYAML)
	cases := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"no arguments", nil, 2, "", "Commands:"},
		{"--help", []string{"--help"}, 0, "Exit codes: 0 ok, 1 runtime error, 2 usage error", ""},
		{"help command", []string{"help", "override", "set"}, 0, "Usage: tollgate override set [flags] <tenant> <bucket>", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"unknown subcommand", []string{"bucket", "drain"}, 2, "", `unknown command "bucket drain"`},
		{"group alone", []string{"override"}, 2, "override list", ""},
		{"group help", []string{"override", "--help"}, 0, "override delete", ""},
		{"unknown flag", []string{"bucket", "get", "--colour", "t1"}, 2, "", "flag provided but not defined: -colour"},
		{"bad flag value", []string{"simulate", "--count", "many"}, 2, "", `invalid value "many" for flag -count`},
		{"missing argument", []string{"bucket", "get", "--config", cfg}, 2, "", "want arguments <tenant> [class], got 0"},
		{"too many arguments", []string{"config", "check", cfg, cfg}, 2, "", "want arguments <file>, got 2"},
		{"no redis", []string{"bucket", "get", "--config", cfg, "t1"}, 2, "", "no Redis: set --redis-url or REDIS_URL"},
		{"bad redis url", []string{"bucket", "reset", "--redis-url", "http://x", "t1"}, 2, "", "bad --redis-url"},
		{"redis down", []string{"bucket", "reset", "--redis-url", "redis://127.0.0.1:1/0", "t1"}, 1, "", "cannot reach Redis at 127.0.0.1:1"},
		{"no database", []string{"override", "list"}, 2, "", "no database: set --database-url or DATABASE_URL"},
		{"bad database scheme", []string{"override", "list", "--database-url", "mysql://x"}, 2, "", `unsupported scheme "mysql"`},
		{"missing sqlite file", []string{"override", "list", "--database-url", "sqlite://" + filepath.Join(t.TempDir(), "none.db")}, 1, "", "'tollgate override migrate' creates it"},
		{"bad tier", []string{"bucket", "get", "--redis-url", "redis://127.0.0.1:1", "--config", cfg, "--tier", "gold", "t1"}, 2, "", `tier "gold" is not in`},
		{"bad class", []string{"bucket", "get", "--redis-url", "redis://127.0.0.1:1", "--config", cfg, "t1", "bulk"}, 2, "", `class "bulk" is not in tier "free"`},
		{"bad prefix", []string{"bucket", "reset", "--redis-url", "redis://127.0.0.1:1", "--prefix", "a b", "t1"}, 2, "", "bad --prefix"},
		{"bad bucket name", []string{"bucket", "reset", "--redis-url", "redis://127.0.0.1:1", "t1", "ex port"}, 2, "", `bad bucket "ex%20port"`},
		{"simulate without quota", []string{"simulate", "--redis-url", "redis://127.0.0.1:1"}, 2, "", "no quota: give --config FILE"},
		{"simulate bad count", []string{"simulate", "--capacity", "1", "--rate", "1", "--count", "0"}, 2, "", "bad --count 0"},
		{"simulate bad quota", []string{"simulate", "--capacity", "-1", "--rate", "1"}, 2, "", "capacity must be > 0"},
		{"simulate both quotas", []string{"simulate", "--config", cfg, "--capacity", "1", "--rate", "1"}, 2, "", "not both"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tollgate(t, nil, tc.args...).check(t, tc.code, tc.stdout, tc.stderr)
		})
	}
	// --help on every command
	for _, c := range []string{"bucket get", "bucket reset", "config check", "override migrate", "override set", "override get", "override list", "override delete", "simulate"} {
		t.Run("help "+c, func(t *testing.T) {
			r := tollgate(t, nil, append(strings.Fields(c), "--help")...)
			r.check(t, 0, "Usage: tollgate "+c+" [flags]", "")
			if !strings.Contains(r.stdout, "--json") {
				t.Errorf("help does not list --json:\n%s", r.stdout)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	good := writeTemp(t, "tiers.yaml", tiersYAML)
	bad := writeTemp(t, "bad.yaml", strings.Replace(tiersYAML, "capacity: 10,", "capacity: -1,", 1)+"colour: blue\n")
	tollgate(t, nil, "config", "check", good).check(t, 0, "ok: 2 tier(s), default free", "")
	tollgate(t, nil, "config", "check", bad).check(t, 1, "",
		"bad.yaml:7: tiers.free.classes.export.capacity: must be > 0, got -1\n"+bad+":12: colour: unknown field")
	tollgate(t, nil, "config", "check", filepath.Join(t.TempDir(), "nope.yaml")).check(t, 1, "", "no such file")
	// a route naming an unknown class is reported in the same run as a bad
	// quota, not only once the quota is fixed
	withRoute := writeTemp(t, "route.yaml", strings.Replace(tiersYAML, "capacity: 10,", "capacity: -1,", 1)+
		"routes:\n  - {method: GET, path: /v1/x, class: bulk}\n")
	tollgate(t, nil, "config", "check", withRoute).check(t, 1, "",
		"route.yaml:7: tiers.free.classes.export.capacity: must be > 0, got -1\n"+withRoute+`:13: routes[0].class: class "bulk" is not defined in tier "free"`)

	r := tollgate(t, nil, "config", "check", "--json", bad)
	var out struct {
		Valid    bool `json:"valid"`
		Problems []struct {
			Line  int    `json:"line"`
			Field string `json:"field"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("--json: %v (exit %d)\n%s", err, r.code, r.stdout)
	}
	if out.Valid || len(out.Problems) != 2 || out.Problems[0].Line != 7 || out.Problems[0].Field != "tiers.free.classes.export.capacity" {
		t.Errorf("--json problems: %+v", out)
	}
	r = tollgate(t, nil, "--json", "config", "check", good)
	var ok map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &ok); err != nil || ok["valid"] != true || ok["default_tier"] != "free" {
		t.Errorf("--json valid: %v %v\n%s", err, ok, r.stdout)
	}
}

// TestConfigCheckRunning: a file valid on its own that drops a class the
// running file's routes name would fail those routes until a restart if it
// were reloaded; with --running, config check refuses it as the reloader
// does, naming the route and the missing class.
func TestConfigCheckRunning(t *testing.T) {
	running := writeTemp(t, "running.yaml", tiersYAML+`routes:
  - {method: POST, path: /v1/export, class: export, cost: 5}
  - {method: "*", path: /v1/health, class: default}
grpc_methods:
  - {method: /acme.v1.Reports/Export, class: export}
`)
	dropped := writeTemp(t, "new.yaml", strings.ReplaceAll(tiersYAML, "      export: {capacity: 10, refill_per_second: 0.1}\n", ""))
	tollgate(t, nil, "config", "check", dropped).check(t, 0, "ok: 2 tier(s)", "") // valid on its own
	r := tollgate(t, nil, "config", "check", "--running", running, dropped)
	r.check(t, 1, "", dropped+`: tiers.free.classes: class "export" is not defined, but route POST /v1/export of the running configuration names it`)
	r.check(t, 1, "", `gRPC method /acme.v1.Reports/Export of the running configuration names it`)
	if strings.Contains(r.stdout, "ok") {
		t.Errorf("refused file reported ok:\n%s", r.stdout)
	}

	r = tollgate(t, nil, "config", "check", "--json", "--running", running, dropped)
	var out struct {
		Valid    bool `json:"valid"`
		Problems []struct {
			File    string `json:"file"`
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("--json: %v (exit %d)\n%s", err, r.code, r.stdout)
	}
	if out.Valid || len(out.Problems) != 2 || out.Problems[0].File != dropped || out.Problems[0].Field != "tiers.free.classes" ||
		!strings.Contains(out.Problems[0].Message, `class "export"`) {
		t.Errorf("--json problems: %+v", out)
	}

	// A new file that keeps what the running routes need passes, and an
	// invalid --running file is reported as such.
	tollgate(t, nil, "config", "check", "--running", running, writeTemp(t, "ok.yaml", tiersYAML)).check(t, 0, "ok: 2 tier(s)", "")
	tollgate(t, nil, "config", "check", "--running", filepath.Join(t.TempDir(), "nope.yaml"), dropped).check(t, 1, "", "--running: ")
}

func TestOverrideCommands(t *testing.T) {
	cfg := writeTemp(t, "tiers.yaml", tiersYAML)
	db := "DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "quotas.db")
	env := []string{db, "USER=alice"}
	tollgate(t, env, "override", "list").check(t, 1, "", "override migrate")
	tollgate(t, env, "override", "migrate").check(t, 0, "table tollgate_overrides ready (sqlite", "")
	tollgate(t, env, "override", "migrate").check(t, 0, "ready", "")
	tollgate(t, env, "override", "list").check(t, 0, "no overrides", "")

	tollgate(t, env, "override", "set", "--config", cfg, "t42", "export", "--capacity", "500", "--rate", "2.5", "--reason", "JIRA-1").
		check(t, 0, "set override t42/export: capacity 500, 2.5 tokens/s", "")
	tollgate(t, env, "override", "set", "--config", cfg, "t42", "tenant", "--capacity", "900", "--rate", "9", "--for", "48h", "--by", "bob").
		check(t, 0, "expires", "")
	tollgate(t, env, "override", "set", "--config", cfg, "t7", "default", "--rate", "1", "--capacity", "3").check(t, 0, "t7/default", "")

	r := tollgate(t, env, "override", "get", "--json", "t42", "export")
	var got struct {
		TenantID        string  `json:"tenant_id"`
		Bucket          string  `json:"bucket"`
		Capacity        int64   `json:"capacity"`
		RefillPerSecond float64 `json:"refill_per_second"`
		ExpiresAt       *string `json:"expires_at"`
		UpdatedBy       string  `json:"updated_by"`
		Reason          string  `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("override get --json: %v\n%+v", err, r)
	}
	if got.TenantID != "t42" || got.Capacity != 500 || got.RefillPerSecond != 2.5 || got.ExpiresAt != nil || got.UpdatedBy != "alice" || got.Reason != "JIRA-1" {
		t.Errorf("override get --json = %+v", got)
	}
	tollgate(t, env, "override", "get", "t42", "tenant").check(t, 0, "bob", "")

	r = tollgate(t, env, "override", "list", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 {
		t.Fatalf("list --json: %v, %d rows\n%s", err, len(list), r.stdout)
	}
	r = tollgate(t, env, "override", "list", "t42")
	if r.code != 0 || strings.Count(r.stdout, "t42") != 2 || strings.Contains(r.stdout, "t7") {
		t.Errorf("list t42:\n%s", r.stdout)
	}

	// bad input is a usage error and writes nothing
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"t42", "export", "--rate", "1"}, "--capacity is required"},
		{[]string{"t42", "export", "--capacity", "3"}, "--rate is required"},
		{[]string{"t42", "export"}, "--capacity and --rate are required"},
		{[]string{"t42", "export", "--capacity", "0", "--rate", "1"}, "capacity must be > 0, got 0"},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "0"}, "refill rate must be > 0, got 0"},
		{[]string{"t42", "export", "--capacity", "-3", "--rate", "1"}, "capacity must be > 0, got -3"},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "NaN"}, "refill rate must be finite"},
		{[]string{"t42", "ex/port", "--capacity", "3", "--rate", "1"}, `bucket name "ex/port"`},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "1", "--expires", "tomorrow"}, "bad --expires"},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "1", "--expires", "2001-01-01T00:00:00Z"}, "is not in the future"},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "1", "--for", "1h", "--expires", "2099-01-01T00:00:00Z"}, "not both"},
		{[]string{"t42", "export", "--capacity", "3", "--rate", "1", "--by", " "}, "updated_by is required"},
	} {
		tollgate(t, env, append([]string{"override", "set", "--config", cfg}, bad.args...)...).check(t, 2, "", bad.want)
	}
	// With $USER unset (cron, a container) the change is made by the
	// account the command runs as.
	me := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		me = u.Username
	}
	tollgate(t, []string{db}, "override", "set", "--config", cfg, "t1", "export", "--capacity", "3", "--rate", "1").check(t, 0, "", "")
	tollgate(t, []string{db}, "override", "get", "--json", "t1", "export").check(t, 0, `"updated_by": "`+me+`"`, "")
	tollgate(t, env, "override", "get", "t42", "export").check(t, 0, "500", "")

	tollgate(t, env, "override", "delete", "t42", "export").check(t, 0, "deleted override t42/export", "")
	tollgate(t, env, "override", "delete", "t42", "export").check(t, 1, "", "no override for tenant t42 bucket export")
	tollgate(t, env, "override", "get", "t42", "export").check(t, 1, "", "no override for tenant t42 bucket export")

	// --concurrency sets the bucket's concurrency limit; get and list show
	// it, and a value out of range is a usage error that writes nothing.
	tollgate(t, env, "override", "set", "--config", cfg, "t9", "export", "--capacity", "100", "--rate", "10", "--concurrency", "2").
		check(t, 0, "set override t9/export: capacity 100, 10 tokens/s, 2 in flight", "")
	tollgate(t, env, "override", "get", "--json", "t9", "export").check(t, 0, `"concurrency": 2`, "")
	tollgate(t, env, "override", "list", "t9").check(t, 0, "IN FLIGHT", "")
	for _, bad := range []struct{ n, want string }{
		{"0", "bad --concurrency 0"}, {"-1", "concurrency must be 0 (none) to 100000, got -1"}, {"100001", "got 100001"},
	} {
		tollgate(t, env, "override", "set", "--config", cfg, "t9", "export", "--capacity", "5", "--rate", "1", "--concurrency", bad.n).check(t, 2, "", bad.want)
	}
	tollgate(t, env, "override", "get", "--json", "t9", "export").check(t, 0, `"capacity": 100`, "")
	tollgate(t, env, "override", "set", "--config", cfg, "t9", "export", "--capacity", "100", "--rate", "10").check(t, 0, "", "")
	tollgate(t, env, "override", "get", "--json", "t9", "export").check(t, 0, `"concurrency": 0`, "")
}

// An override of a bucket no tier defines (a typo: "exprot") would be
// stored and never applied. override set checks the bucket against the
// tier file the services load, names the known buckets, and writes
// nothing; --force stores it anyway.
func TestOverrideSetUnknownBucket(t *testing.T) {
	cfg := writeTemp(t, "tiers.yaml", tiersYAML)
	noCeiling := writeTemp(t, "plain.yaml", `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 0.01}
`)
	db := "DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "quotas.db")
	env := []string{db, "USER=alice"}
	tollgate(t, env, "override", "migrate").check(t, 0, "ready", "")

	set := func(args ...string) result {
		t.Helper()
		return tollgate(t, env, append([]string{"override", "set", "--capacity", "5", "--rate", "1"}, args...)...)
	}
	set("--config", cfg, "t42", "exprot").check(t, 2, "",
		`bucket "exprot" is not defined by any tier in `+cfg+` (known buckets: default, export, tenant)`)
	set("--config", cfg, "t42", "exprot").check(t, 2, "", "--force")
	// a ceiling override needs a tier with a ceiling
	set("--config", noCeiling, "t42", "tenant").check(t, 2, "", "(known buckets: default)")
	// without the tier file the bucket cannot be checked
	set("t42", "exprot").check(t, 2, "", "--config")
	tollgate(t, env, "override", "list").check(t, 0, "no overrides", "")

	set("--config", cfg, "t42", "export").check(t, 0, "set override t42/export", "")
	set("--config", cfg, "t42", "tenant").check(t, 0, "set override t42/tenant", "")
	set("--force", "t42", "bulk").check(t, 0, "set override t42/bulk", "")
	set("--force", "--config", cfg, "t43", "bulk").check(t, 0, "set override t43/bulk", "no tier defines bucket")
	r := tollgate(t, env, "override", "list")
	for _, want := range []string{"export", "tenant", "bulk"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("list lacks %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "exprot") {
		t.Errorf("a refused override was stored:\n%s", r.stdout)
	}
}

// One row SQLite holds with a capacity that is not an integer (1.5, written
// by hand) does not break override list: every other row is listed, in text
// and JSON, and the bad one is reported on stderr with its tenant and
// bucket.
func TestOverrideListReportsUnreadableRow(t *testing.T) {
	cfg := writeTemp(t, "tiers.yaml", tiersYAML)
	path := filepath.Join(t.TempDir(), "quotas.db")
	env := []string{"DATABASE_URL=sqlite://" + path, "USER=alice"}
	tollgate(t, env, "override", "migrate").check(t, 0, "ready", "")
	tollgate(t, env, "override", "set", "--config", cfg, "t42", "default", "--capacity", "7", "--rate", "1").check(t, 0, "", "")
	tollgate(t, env, "override", "set", "--config", cfg, "t42", "export", "--capacity", "8", "--rate", "1").check(t, 0, "", "")
	tollgate(t, env, "override", "set", "--config", cfg, "t7", "default", "--capacity", "9", "--rate", "1").check(t, 0, "", "")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, "UPDATE tollgate_overrides SET capacity = 1.5 WHERE tenant_id = 't42' AND bucket = 'export'")
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{{"override", "list"}, {"override", "list", "t42"}} {
		r := tollgate(t, env, args...)
		r.check(t, 0, "", `tenant "t42" bucket "export" cannot be read: capacity 1.5: not an integer`)
		if !strings.Contains(r.stdout, "t42     default  7") || strings.Contains(r.stdout, "export") {
			t.Errorf("%v: want t42/default listed and t42/export only on stderr:\n%s", args, r.stdout)
		}
		if (len(args) == 2) != strings.Contains(r.stdout, "t7") {
			t.Errorf("%v: t7 listed wrongly:\n%s", args, r.stdout)
		}
	}
	r := tollgate(t, env, "override", "list", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || r.code != 0 {
		t.Fatalf("list --json: %v, %d rows, exit %d\n%s\n%s", err, len(list), r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, `"export"`) {
		t.Errorf("list --json does not report the bad row on stderr:\n%s", r.stderr)
	}
	// the row itself can be inspected and removed
	tollgate(t, env, "override", "get", "t42", "export").check(t, 1, "", "capacity 1.5: not an integer")
	tollgate(t, env, "override", "delete", "t42", "export").check(t, 0, "deleted override t42/export", "")
	r = tollgate(t, env, "override", "list")
	r.check(t, 0, "t7", "")
	if r.stderr != "" {
		t.Errorf("stderr after the bad row was deleted: %s", r.stderr)
	}
}

// redisEnv returns the environment for the shared test Redis, and a
// client on it.
func redisEnv(t *testing.T) ([]string, *redis.Client) {
	t.Helper()
	c := redistest.Client(t)
	return []string{"REDIS_URL=" + redistest.URL(t)}, c
}

// serviceLimiter is the limiter a service would build from the tier file
// at cfgPath, on client under prefix, with a 5 s timeout so that a loaded
// machine does not turn a charge into a store failure. t closes it.
func serviceLimiter(t *testing.T, client redis.UniversalClient, cfgPath, prefix string) *core.Limiter {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cfg.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, r, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

func TestBucketGetIsReadOnlyAndReset(t *testing.T) {
	env, client := redisEnv(t)
	prefix := redistest.Prefix(t)
	cfgPath := writeTemp(t, "tiers.yaml", tiersYAML)
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "quotas.db")
	ctx := t.Context()

	// Charge t42 through a real limiter, as a service would.
	lim := serviceLimiter(t, client, cfgPath, prefix)
	if d, err := lim.Allow(ctx, quota.Tenant{ID: "t42"}, "default", 5); err != nil || !d.Allowed {
		t.Fatalf("Allow: %+v, %v", d, err)
	}
	key, _ := lim.Keys().Bucket("t42", "default")
	before, err := client.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}

	type row struct {
		Bucket          string  `json:"bucket"`
		Tokens          float64 `json:"tokens"`
		Remaining       int64   `json:"remaining"`
		Capacity        int64   `json:"capacity"`
		RefillPerSecond float64 `json:"refill_per_second"`
		Exists          bool    `json:"exists"`
		TTLMillis       int64   `json:"ttl_ms"`
		Source          string  `json:"source"`
		Key             string  `json:"key"`
	}
	get := func(args ...string) map[string]row {
		t.Helper()
		res := tollgate(t, env, append([]string{"bucket", "get", "--json", "--config", cfgPath, "--prefix", prefix}, args...)...)
		var out struct {
			Tenant  string `json:"tenant"`
			Buckets []row  `json:"buckets"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != 0 {
			t.Fatalf("bucket get: %v\n%+v", err, res)
		}
		m := map[string]row{}
		for _, b := range out.Buckets {
			m[b.Bucket] = b
		}
		return m
	}
	for range 3 {
		got := get("t42")
		d := got["default"]
		if len(got) != 3 || d.Remaining != 15 || d.Capacity != 20 || !d.Exists || d.TTLMillis <= 0 || d.Source != "tier" || d.Key != key {
			t.Errorf("bucket get t42 = %+v", got)
		}
		if e := got["export"]; e.Exists || e.Tokens != 10 || e.TTLMillis != -1 {
			t.Errorf("untouched export bucket = %+v", e)
		}
		if c := got[quota.CeilingBucket]; c.Capacity != 100 || c.Remaining != 95 {
			t.Errorf("ceiling = %+v", c)
		}
	}
	after, _ := client.Get(ctx, key).Result()
	if after != before {
		t.Errorf("bucket get wrote to the bucket: %q -> %q", before, after)
	}
	exportKey, _ := lim.Keys().Bucket("t42", "export")
	if n, _ := client.Exists(ctx, exportKey).Result(); n != 0 {
		t.Errorf("bucket get created %s", exportKey)
	}
	text := tollgate(t, env, "bucket", "get", "--config", cfgPath, "--prefix", prefix, "t42", "default")
	text.check(t, 0, "default  15.", "")
	if !strings.Contains(text.stdout, "tenant ") || strings.Contains(text.stdout, "export") {
		t.Errorf("bucket get t42 default should show default and the ceiling:\n%s", text.stdout)
	}

	// An override shows up as the source, with its capacity; the tokens are
	// clamped to it.
	env = append(env, "DATABASE_URL="+dbURL, "USER=test")
	tollgate(t, env, "override", "migrate").check(t, 0, "ready", "")
	tollgate(t, env, "override", "set", "--config", cfgPath, "t42", "default", "--capacity", "7", "--rate", "0.01").check(t, 0, "", "")
	if d := get("t42", "default")["default"]; d.Source != "override" || d.Capacity != 7 || d.Remaining != 7 {
		t.Errorf("with override: %+v", d)
	}
	if d := get("--tier", "pro", "t42", "default")["default"]; d.Capacity != 7 {
		t.Errorf("override ignores the tier: %+v", d)
	}

	// reset one bucket, then all
	if _, err := lim.Allow(ctx, quota.Tenant{ID: "t42"}, "export", 1); err != nil {
		t.Fatal(err)
	}
	tollgate(t, env, "bucket", "reset", "--prefix", prefix, "t42", "default").check(t, 0, "reset tenant t42 (prefix "+prefix+"): default: 1 key(s) deleted", "")
	if n, _ := client.Exists(ctx, key, exportKey).Result(); n != 1 {
		t.Errorf("after reset of default: %d of 2 keys exist, want export only", n)
	}
	other, _ := lim.Keys().Bucket("t43", "default")
	if _, err := lim.Allow(ctx, quota.Tenant{ID: "t43"}, "default", 1); err != nil {
		t.Fatal(err)
	}
	// every bucket of a tenant: not without confirmation, and there is no
	// terminal here
	tollgate(t, env, "bucket", "reset", "--prefix", prefix, "t42").check(t, 2, "", "stdin is not a terminal: pass --yes")
	if n, _ := client.Exists(ctx, exportKey).Result(); n != 1 {
		t.Fatal("an unconfirmed reset deleted the bucket")
	}
	tollgate(t, env, "--json", "bucket", "reset", "--yes", "--prefix", prefix, "t42").check(t, 0, `"deleted": 2`, "") // export and the ceiling
	if n, _ := client.Exists(ctx, key, exportKey).Result(); n != 0 {
		t.Errorf("after reset of all: %d keys left", n)
	}
	if n, _ := client.Exists(ctx, other).Result(); n != 1 {
		t.Errorf("reset of t42 deleted t43's bucket")
	}
	if d := get("t42", "default")["default"]; d.Exists || d.Remaining != 7 {
		t.Errorf("after reset: %+v", d)
	}
}

func TestSimulate(t *testing.T) {
	env, client := redisEnv(t)
	cfgPath := writeTemp(t, "tiers.yaml", tiersYAML)
	type sim struct {
		Engine   string `json:"engine"`
		Admitted int    `json:"admitted"`
		Denied   int    `json:"denied"`
		Requests []struct {
			Allowed      bool   `json:"allowed"`
			Reason       string `json:"reason"`
			Remaining    int64  `json:"remaining"`
			RetryAfterMs int64  `json:"retry_after_ms"`
		} `json:"requests"`
	}
	run := func(args ...string) sim {
		t.Helper()
		r := tollgate(t, env, append([]string{"simulate", "--json"}, args...)...)
		var s sim
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
			t.Fatalf("simulate %v: %v\n%+v", args, err, r)
		}
		return s
	}
	// export: capacity 10, 0.1/s; cost 5 every 10 s refills 1 token between requests
	s := run("--config", cfgPath, "--tier", "free", "--class", "export", "--cost", "5", "--count", "5", "--interval", "10s")
	wantAllowed := []bool{true, true, false, false, false}
	if s.Engine != "lua-script-client-clock" || s.Admitted != 2 || s.Denied != 3 {
		t.Errorf("simulate: %+v", s)
	}
	for i, r := range s.Requests {
		if r.Allowed != wantAllowed[i] {
			t.Errorf("request %d allowed %v, want %v", i+1, r.Allowed, wantAllowed[i])
		}
	}
	// third request at 20 s: 0 + 2 tokens refilled, 3 missing at 0.1/s
	if r := s.Requests[2]; r.Remaining != 2 || r.RetryAfterMs != 30000 {
		t.Errorf("third request: %+v; want remaining 2, retry 30000 ms", r)
	}
	// 50 s later: 5 tokens refilled since the second request (the denials charged nothing)
	if s := run("--config", cfgPath, "--class", "export", "--cost", "5", "--count", "2", "--interval", "50s"); s.Admitted != 2 {
		t.Errorf("with 50 s between requests: %+v", s)
	}
	// ad-hoc quota; cost over capacity is never admitted
	if s := run("--capacity", "3", "--rate", "1", "--cost", "4", "--count", "2"); s.Admitted != 0 || s.Requests[0].Reason != "cost_exceeds_capacity" {
		t.Errorf("cost over capacity: %+v", s)
	}
	// the tenant's overrides apply with --tenant
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "q.db")
	denv := append(env, "DATABASE_URL="+dbURL, "USER=test")
	tollgate(t, denv, "override", "migrate").check(t, 0, "", "")
	tollgate(t, denv, "override", "set", "--config", cfgPath, "big", "export", "--capacity", "50", "--rate", "0.1").check(t, 0, "", "")
	r := tollgate(t, denv, "simulate", "--config", cfgPath, "--class", "export", "--cost", "5", "--count", "12", "--interval", "0s", "--tenant", "big")
	r.check(t, 0, "admitted 10 of 12", "")
	if !strings.Contains(r.stdout, "real script, simulated clock") {
		t.Errorf("simulate does not say how it computes:\n%s", r.stdout)
	}
	// nothing is left behind in Redis
	keys, err := client.Keys(t.Context(), "tollgate-sim-*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("simulate left keys behind: %v, %v", keys, err)
	}
}

// TestBucketGetOnEveryRedisURLForm: --redis-url takes a Cluster's and a
// Sentinel's URL, and bucket get reads the bucket a service charged there.
func TestBucketGetOnEveryRedisURLForm(t *testing.T) {
	cfgPath := writeTemp(t, "tiers.yaml", tiersYAML)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cluster := redistest.SharedCluster(t)
	master := redistest.NewServer(t)
	sentinel := redistest.NewSentinel(t, "mymaster", master.Addr())
	for _, c := range []struct {
		name, url string
		client    redis.UniversalClient
	}{
		{"cluster", "redis+cluster://" + strings.Join(cluster.Options().Addrs, ","), cluster},
		{"sentinel", "redis+sentinel://" + sentinel.Addr() + "/mymaster", master.Client(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			r, _ := cfg.NewResolver()
			lim, err := core.New(c.client, r, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			if d, err := lim.Allow(t.Context(), quota.Tenant{ID: "t42"}, "default", 5); err != nil || !d.Allowed {
				t.Fatalf("Allow: %+v, %v", d, err)
			}
			res := tollgate(t, nil, "bucket", "get", "--json", "--redis-url", c.url, "--config", cfgPath, "--prefix", prefix, "t42", "default")
			var out struct {
				Buckets []struct {
					Bucket    string `json:"bucket"`
					Remaining int64  `json:"remaining"`
					Exists    bool   `json:"exists"`
				} `json:"buckets"`
			}
			if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != 0 {
				t.Fatalf("bucket get: %v\n%+v", err, res)
			}
			for _, b := range out.Buckets {
				if b.Bucket == "default" && (!b.Exists || b.Remaining != 15) {
					t.Errorf("default bucket on the %s: %+v, want it to exist with 15 of 20 left", c.name, b)
				}
			}
			if len(out.Buckets) == 0 {
				t.Errorf("no buckets in %s", res.stdout)
			}
		})
	}
}

// bucket get shows the concurrency slots held and their deadlines; bucket
// reset frees them.
func TestBucketSlots(t *testing.T) {
	env, client := redisEnv(t)
	prefix := redistest.Prefix(t)
	cfgPath := writeTemp(t, "tiers.yaml", "default_tier: free\ntiers:\n  free:\n    classes:\n      default: {capacity: 20, refill_per_second: 2}\n      reports: {capacity: 100, refill_per_second: 10, concurrency: 2}\n")
	ctx := t.Context()
	lim := serviceLimiter(t, client, cfgPath, prefix)
	for range 2 {
		if d, err := lim.Allow(ctx, quota.Tenant{ID: "t42"}, "reports", 1); err != nil || d.Slot == nil {
			t.Fatalf("Allow: %+v, %v", d, err)
		}
	}
	res := tollgate(t, env, "bucket", "get", "--json", "--config", cfgPath, "--prefix", prefix, "t42", "reports")
	var out struct {
		Buckets []struct {
			Bucket      string `json:"bucket"`
			Concurrency int64  `json:"concurrency"`
			Slots       []struct {
				ID               string `json:"id"`
				DeadlineInMillis int64  `json:"deadline_in_ms"`
			} `json:"slots"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != 0 || len(out.Buckets) != 1 {
		t.Fatalf("bucket get: %v\n%+v", err, res)
	}
	b := out.Buckets[0]
	if b.Concurrency != 2 || len(b.Slots) != 2 || b.Slots[0].ID == "" || b.Slots[0].DeadlineInMillis <= 0 || b.Slots[1].DeadlineInMillis > 15_000 {
		t.Fatalf("bucket get reports = %+v; want 2 slots, deadlines within the lease (15 s: three 5 s timeouts)", b)
	}
	tollgate(t, env, "bucket", "get", "--config", cfgPath, "--prefix", prefix, "t42", "reports").check(t, 0, "reports: 2 of 2 concurrency slots held; deadlines in ", "")
	if d, _ := lim.Allow(ctx, quota.Tenant{ID: "t42"}, "reports", 1); d.Reason != core.ReasonConcurrencyLimit {
		t.Fatalf("a third: %v", d.Reason)
	}
	tollgate(t, env, "bucket", "reset", "--prefix", prefix, "t42", "reports").check(t, 0, "reports: 2 key(s) deleted", "")
	tollgate(t, env, "bucket", "get", "--config", cfgPath, "--prefix", prefix, "t42", "reports").check(t, 0, "reports: 0 of 2 concurrency slots held", "")
	d, err := lim.Allow(ctx, quota.Tenant{ID: "t42"}, "reports", 1)
	if err != nil || d.Slot == nil {
		t.Fatalf("after reset: %v, %v", d.Reason, err)
	}
	d.Slot.Release()
}

// TestFlagsBeforeTheCommand: every common flag a command takes may come
// before the command too (tollgate --config tiers.yaml bucket get t42),
// with the value it would have after it; a flag given after the command
// wins.
func TestFlagsBeforeTheCommand(t *testing.T) {
	env, client := redisEnv(t)
	prefix := redistest.Prefix(t)
	cfgPath := writeTemp(t, "tiers.yaml", tiersYAML)
	lim := serviceLimiter(t, client, cfgPath, prefix)
	if d, err := lim.Allow(t.Context(), quota.Tenant{ID: "t42"}, "default", 5); err != nil || !d.Allowed {
		t.Fatalf("Allow: %+v, %v", d, err)
	}
	tollgate(t, env, "--config", cfgPath, "--prefix", prefix, "--timeout", "3s", "bucket", "get", "t42", "default").check(t, 0, "default  15.", "")
	tollgate(t, env, "--config", cfgPath, "bucket", "get", "--prefix", prefix, "t42", "default").check(t, 0, "default  15.", "")
	// after the command wins: the pro tier's file says capacity 200 for
	// tier pro, the free file 20
	pro := writeTemp(t, "pro.yaml", strings.Replace(tiersYAML, "default_tier: free", "default_tier: pro", 1))
	tollgate(t, env, "--config", cfgPath, "bucket", "get", "--json", "--config", pro, "--prefix", prefix, "t42", "default").check(t, 0, `"capacity": 200`, "")
	tollgate(t, env, "--timeout", "soon", "bucket", "get", "t42").check(t, 2, "", `invalid value "soon" for flag -timeout`)
	tollgate(t, env, "--config", filepath.Join(t.TempDir(), "none.yaml"), "simulate").check(t, 1, "", "none.yaml")
}

// TestMissingFileSaidOnce: a file that cannot be read is one line naming
// the flag, the file and the reason, not a heading repeated over it.
func TestMissingFileSaidOnce(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.yaml")
	cfg := writeTemp(t, "tiers.yaml", tiersYAML)
	for _, args := range [][]string{
		{"simulate", "--config", none},
		{"bucket", "get", "--redis-url", "redis://127.0.0.1:1", "--config", none, "t1"},
		{"config", "check", none},
		{"config", "check", "--running", none, cfg},
	} {
		res := tollgate(t, nil, args...)
		res.check(t, 1, "", none+": no such file or directory")
		if lines := strings.Count(strings.TrimSpace(res.stderr), "\n") + 1; lines != 1 || strings.Count(res.stderr, "invalid") > 0 {
			t.Errorf("%v: want one line without a repeated heading, got:\n%s", args, res.stderr)
		}
	}
}

// TestBucketResetOfNothingSaysSo: a reset that deletes no key says that
// nothing was reset, and with --config names a bucket no tier defines.
func TestBucketResetOfNothingSaysSo(t *testing.T) {
	env, _ := redisEnv(t)
	prefix := redistest.Prefix(t)
	cfgPath := writeTemp(t, "tiers.yaml", tiersYAML)
	tollgate(t, env, "bucket", "reset", "--prefix", prefix, "t42", "nosuch").check(t, 0, "nosuch: nothing to reset", "")
	tollgate(t, env, "bucket", "reset", "--prefix", prefix, "--config", cfgPath, "t42", "nosuch").check(t, 0, "nothing to reset", `"nosuch" is not a class of any tier in `+cfgPath)
	tollgate(t, env, "--json", "bucket", "reset", "--prefix", prefix, "t42", "export").check(t, 0, `"deleted": 0`, "")
}

// TestConfigCheckRunningDroppedTier: a file that drops a tier of the
// running file is refused, naming the tier: that tier's tenants would fail
// every check (an unknown tier) from the reload on.
func TestConfigCheckRunningDroppedTier(t *testing.T) {
	running := writeTemp(t, "running.yaml", tiersYAML)
	noPro := writeTemp(t, "new.yaml", tiersYAML[:strings.Index(tiersYAML, "  pro:\n")])
	tollgate(t, nil, "config", "check", noPro).check(t, 0, "ok: 1 tier(s)", "") // valid on its own
	r := tollgate(t, nil, "config", "check", "--running", running, noPro)
	r.check(t, 1, "", noPro+`: tiers: tier "pro" is not defined, but the running configuration defines it`)
	if strings.Contains(r.stdout, "ok") {
		t.Errorf("refused file reported ok:\n%s", r.stdout)
	}
}
