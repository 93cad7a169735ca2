package config_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
)

// version returns a configuration whose numbers encode v: the class
// capacity is 10+v and the ceiling's 1000+v, so a reader can tell whether
// both came from the same file.
func version(v int) string {
	return fmt.Sprintf(`default_tier: free
tiers:
  free:
    ceiling: {capacity: %d, refill_per_second: 5}
    classes:
      default: {capacity: %d, refill_per_second: 2}
routes:
  - {method: GET, path: /v%d, class: default}
`, 1000+v, 10+v, v)
}

const invalid = `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: -1, refill_per_second: 2}
`

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeAtomic replaces path by rename, as editors and config management do.
func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setup(t *testing.T, opts ...config.ReloadOption) (path string, r *quota.TieredResolver, rl *config.Reloader, logs *syncBuffer) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "tiers.yaml")
	writeFile(t, path, version(0))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err = cfg.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	opts = append([]config.ReloadOption{config.WithReloadLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	rl, err = config.Watch(ctx, path, r, opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-rl.Done()
	})
	return path, r, rl, logs
}

func classCap(t testing.TB, r quota.Resolver) (int64, int64, error) {
	bs, err := r.Buckets(context.Background(), quota.Tenant{ID: "t1"}, "default")
	if err != nil {
		return 0, 0, err
	}
	if len(bs) != 2 {
		return 0, 0, fmt.Errorf("want 2 buckets, got %+v", bs)
	}
	return bs[0].Quota.Capacity, bs[1].Quota.Capacity, nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReloadUnderConcurrentTraffic rewrites the file many times, in place
// and by rename, sometimes with an invalid file, while goroutines resolve
// quotas nonstop: no call fails, every answer comes from one valid file
// (class and ceiling of the same version), and an invalid file never
// replaces a valid one.
func TestReloadUnderConcurrentTraffic(t *testing.T) {
	path, r, rl, logs := setup(t, config.WithPollInterval(time.Millisecond))
	stop := make(chan struct{})
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, ceil, err := classCap(t, r)
				calls.Add(1)
				if err == nil && ceil-1000 != c-10 {
					err = fmt.Errorf("torn read: class %d and ceiling %d from different files", c, ceil)
				}
				if err == nil && (c < 10 || c > 10+200) {
					err = fmt.Errorf("capacity %d from no valid file", c)
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	var last int64
	for v := 1; v <= 200; v++ {
		if v%10 == 0 {
			writeFile(t, path, invalid)
			if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), "capacity: must be > 0, got -1") {
				t.Errorf("version %d: invalid file: Reload = %v", v, err)
			}
			if c, _, err := classCap(t, r); err != nil || c != 10+last {
				t.Errorf("after an invalid file: capacity %d, %v; want the previous %d", c, err, 10+last)
			}
			continue
		}
		if v%2 == 0 {
			writeAtomic(t, path, version(v))
		} else {
			writeFile(t, path, version(v)) // in place: the poller may see half a file
		}
		if err := rl.Reload(); err != nil {
			t.Errorf("version %d: Reload: %v", v, err)
		}
		last = int64(v)
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d calls failed during reloads; first: %v", n, calls.Load(), firstErr.Load())
	}
	if calls.Load() < 100 {
		t.Errorf("only %d calls ran during the reloads", calls.Load())
	}
	if c, ceil, _ := classCap(t, r); c != 10+last || ceil != 1000+last {
		t.Errorf("final capacities %d/%d, want %d/%d", c, ceil, 10+last, 1000+last)
	}
	if got, ok := rl.Config().Routes.Lookup("GET", fmt.Sprintf("/v%d", last)); !ok || got.Class != "default" {
		t.Errorf("configuration in force is not the last file: routes %+v", rl.Config().Routes)
	}
	applied, refused := rl.ReloadStats()
	if applied < 180 || refused < 20 {
		t.Errorf("applied %d, refused %d; want >= 180 and >= 20", applied, refused)
	}
	if !strings.Contains(logs.String(), "configuration refused; keeping the previous one") {
		t.Errorf("refusals not logged:\n%.2000s", logs.String())
	}
}

func TestReloadOnFileChange(t *testing.T) {
	path, r, rl, logs := setup(t, config.WithPollInterval(5*time.Millisecond))
	writeAtomic(t, path, version(7))
	waitFor(t, "the poller to apply version 7", func() bool { c, _, _ := classCap(t, r); return c == 17 })

	writeAtomic(t, path, invalid) // in place, the poller could first see an empty file
	waitFor(t, "the poller to refuse the invalid file", func() bool { return rl.LastError() != nil })
	if c, _, _ := classCap(t, r); c != 17 {
		t.Errorf("invalid file replaced the valid one: capacity %d", c)
	}
	if err := rl.LastError(); !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "tiers.free.classes.default.capacity: must be > 0, got -1") {
		t.Errorf("LastError = %v", err)
	}
	// An unchanged invalid file is reported once, not at every poll.
	time.Sleep(50 * time.Millisecond)
	if n := strings.Count(logs.String(), "configuration refused"); n != 1 {
		t.Errorf("refusal logged %d times, want once:\n%s", n, logs.String())
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the poller to notice the file is gone", func() bool {
		err := rl.LastError()
		return err != nil && strings.Contains(err.Error(), "no such file")
	})
	if c, _, _ := classCap(t, r); c != 17 {
		t.Errorf("missing file changed the tiers: capacity %d", c)
	}
	writeAtomic(t, path, version(8))
	waitFor(t, "the poller to apply version 8", func() bool { c, _, _ := classCap(t, r); return c == 18 })
	if rl.LastError() != nil {
		t.Errorf("LastError after a good file = %v", rl.LastError())
	}
}

func TestReloadWarnsAboutRestartOnlyFields(t *testing.T) {
	path, _, rl, logs := setup(t, config.WithPollInterval(time.Hour))
	writeFile(t, path, version(1)+"key_prefix: other\ntimeout: 3s\n")
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `take effect only at restart`) || !strings.Contains(logs.String(), `fields="key_prefix, timeout, routes"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}

func TestWatchRefusesAnInvalidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	writeFile(t, path, version(0))
	cfg, _ := config.Load(path)
	r, _ := cfg.NewResolver()
	writeFile(t, path, invalid)
	rl, err := config.Watch(context.Background(), path, r)
	if err == nil || rl != nil || !strings.Contains(err.Error(), path+":5: tiers.free.classes.default.capacity") {
		t.Fatalf("Watch = %v, %v; want the file's error", rl, err)
	}
	if c, _, _ := classCap(t, r); c != 10 {
		t.Errorf("resolver changed: %d", c)
	}
	if _, err := config.NewReloader(path, nil); !errors.Is(err, core.ErrInvalidConfig) {
		t.Errorf("NewReloader(nil resolver) = %v", err)
	}
}

func TestRunTwiceFails(t *testing.T) {
	_, _, rl, _ := setup(t)
	if err := rl.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v", err)
	}
}

// running is the file a service starts with: its routes, gRPC methods and
// anonymous tier are fixed in the gate until a restart.
const running = `default_tier: free
anonymous_tier: anon
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
      export: {capacity: 10, refill_per_second: 0.1}
  anon:
    classes:
      default: {capacity: 5, refill_per_second: 1}
      export: {capacity: 5, refill_per_second: 0.1}
routes:
  - {method: POST, path: /v1/export, class: export, cost: 5}
  - {method: GET, path: /v1/profile, class: default}
grpc_methods:
  - {method: /acme.v1.Reports/*, class: export}
`

// TestReloadRefusesAFileTheRunningRoutesCannotUse: each file below is valid
// on its own, but the route table and anonymous tier in force (those of the
// file the service started with) name a class or tier it drops, or charge a
// cost it can no longer admit. Applied, those requests would fail until a
// restart; so the file is refused whole, logged and counted, and the tiers
// in force keep serving. Later files are still checked against the routes
// in force, not against the last file applied.
func TestReloadRefusesAFileTheRunningRoutesCannotUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	writeFile(t, path, running)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cfg.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	var hookErrs atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	rl, err := config.Watch(ctx, path, r, config.WithPollInterval(time.Hour),
		config.WithReloadLogger(slog.New(slog.NewTextHandler(logs, nil))),
		config.WithOnReload(func(c *config.Config, err error) {
			if err != nil {
				hookErrs.Add(1)
			}
		}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-rl.Done() })

	// resolves checks that every class and tier the running gate names
	// still resolves, with the capacities of the running file.
	resolves := func(t *testing.T) {
		t.Helper()
		for _, c := range []struct {
			tenant quota.Tenant
			class  string
			cap    int64
		}{{quota.Tenant{ID: "t1"}, "export", 10}, {quota.Tenant{ID: "t1"}, "default", 20}, {quota.Tenant{ID: "anonymous:10.0.0.1", Tier: "anon"}, "export", 5}} {
			bs, err := r.Buckets(context.Background(), c.tenant, c.class)
			if err != nil || len(bs) != 1 || bs[0].Quota.Capacity != c.cap {
				t.Errorf("tenant %+v class %s: %+v, %v; want capacity %d", c.tenant, c.class, bs, err, c.cap)
			}
		}
	}

	runningTiers := running[:strings.Index(running, "routes:")]
	dropExport := `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
  anon:
    classes:
      default: {capacity: 5, refill_per_second: 1}
`
	cases := []struct {
		name, file string
		want       []string
	}{
		{"class dropped with its routes", dropExport, []string{
			`tiers.anon.classes: class "export" is not defined, but route POST /v1/export of the running configuration names it`,
			`tiers.free.classes: class "export" is not defined, but route POST /v1/export of the running configuration names it`,
			`class "export" is not defined, but gRPC method /acme.v1.Reports/* of the running configuration names it`,
		}},
		{"class dropped, routes moved to another class", dropExport + `routes:
  - {method: POST, path: /v1/export, class: default, cost: 5}
`, []string{`class "export" is not defined, but route POST /v1/export of the running configuration names it`}},
		{"anonymous tier dropped", `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
      export: {capacity: 10, refill_per_second: 0.1}
`, []string{`tiers: tier "anon" is not defined, but it is the anonymous_tier of the running configuration`}},
		{"capacity below a running route's cost", strings.Replace(runningTiers, "export: {capacity: 10,", "export: {capacity: 3,", 1), []string{
			`tiers.free.classes.export.capacity: 3 is less than the cost 5 of route POST /v1/export of the running configuration`,
		}},
		{"ceiling below a running route's cost", strings.Replace(runningTiers, "  free:\n", "  free:\n    ceiling: {capacity: 4, refill_per_second: 1}\n", 1), []string{
			`tiers.free.ceiling.capacity: 4 is less than the cost 5 of route POST /v1/export of the running configuration`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := config.Parse("new.yaml", []byte(tc.file)); err != nil {
				t.Fatalf("the file must be valid on its own: %v", err)
			}
			_, refusedBefore := rl.ReloadStats()
			hooksBefore, logsBefore := hookErrs.Load(), strings.Count(logs.String(), "configuration refused")
			writeAtomic(t, path, tc.file)
			err := rl.Reload()
			if err == nil {
				t.Fatal("Reload applied a file the running routes cannot use")
			}
			if !errors.Is(err, core.ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("error does not name the new file first:\n%v", err)
			}
			if got := rl.LastError(); got == nil || got.Error() != err.Error() {
				t.Errorf("LastError = %v", got)
			}
			if _, refused := rl.ReloadStats(); refused != refusedBefore+1 {
				t.Errorf("refused count %d, want %d", refused, refusedBefore+1)
			}
			if hookErrs.Load() != hooksBefore+1 {
				t.Errorf("WithOnReload was not told of the refusal")
			}
			if strings.Count(logs.String(), "configuration refused") != logsBefore+1 {
				t.Errorf("refusal not logged:\n%s", logs.String())
			}
			if c := rl.Config(); c == nil || c.AnonymousTier != "anon" || len(c.Tiers.Tiers["free"].Classes) != 2 {
				t.Errorf("Config() changed to the refused file: %+v", c)
			}
			resolves(t)
		})
	}

	// A file that keeps what the running routes need is applied, even with
	// routes of its own that differ (those take effect at restart) ...
	keep := strings.Replace(runningTiers, "default: {capacity: 20,", "default: {capacity: 30,", 1)
	writeAtomic(t, path, keep)
	if err := rl.Reload(); err != nil {
		t.Fatalf("a file the running routes can use was refused: %v", err)
	}
	if bs, err := r.Buckets(context.Background(), quota.Tenant{ID: "t1"}, "default"); err != nil || bs[0].Quota.Capacity != 30 {
		t.Errorf("after a good file: %+v, %v", bs, err)
	}
	// ... and the routes in force are still those of the first file: the
	// last file applied has none, yet dropping export is refused.
	writeAtomic(t, path, dropExport)
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), "route POST /v1/export of the running configuration") {
		t.Errorf("after a file without routes, dropping a class the running routes name: Reload = %v", err)
	}
	if bs, err := r.Buckets(context.Background(), quota.Tenant{ID: "t1"}, "export"); err != nil || len(bs) != 1 {
		t.Errorf("class export no longer resolves: %+v, %v", bs, err)
	}
}

// TestReloadWaitsForASlowWriter rewrites the file in place again and
// again, each time in two writes with a pause shorter than half the poll
// interval between them; the first write alone is a valid file (the tiers
// without the routes). The reloader must never apply that half: only a
// file unchanged over half a poll interval is applied, and then the whole
// one is.
func TestReloadWaitsForASlowWriter(t *testing.T) {
	const interval = 200 * time.Millisecond
	var mu sync.Mutex
	var applied []*config.Config
	path, r, _, _ := setup(t, config.WithPollInterval(interval), config.WithOnReload(func(c *config.Config, err error) {
		if err == nil {
			mu.Lock()
			applied = append(applied, c)
			mu.Unlock()
		}
	}))
	full := version(9)
	cut := strings.Index(full, "routes:")
	half, rest := full[:cut], full[cut:]
	if _, err := config.Parse("half.yaml", []byte(half)); err != nil {
		t.Fatalf("the first write must be a valid file on its own: %v", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 30 { // several poll intervals of rewriting
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(half), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval / 10)
		if _, err := f.WriteAt([]byte(rest), int64(len(half))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the whole file to be applied", func() bool { c, _, _ := classCap(t, r); return c == 19 })
	mu.Lock()
	defer mu.Unlock()
	for _, c := range applied {
		if len(c.Routes) != 1 {
			t.Fatalf("a half-written file was applied: %d routes, want 1", len(c.Routes))
		}
	}
}

// A reload option given a value it cannot use fails NewReloader, naming
// it; a nil option is skipped.
func TestReloadOptionsRefuseBadValues(t *testing.T) {
	r, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	for option, o := range map[string]config.ReloadOption{
		"config.WithPollInterval": config.WithPollInterval(0),
		"config.WithOnReload":     config.WithOnReload(nil),
	} {
		if _, err := config.NewReloader("tiers.yaml", r, o); !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), option+": ") {
			t.Errorf("%s: %v, want an error naming it", option, err)
		}
	}
	if _, err := config.NewReloader("tiers.yaml", r, nil, config.WithPollInterval(time.Second)); err != nil {
		t.Fatal(err)
	}
}
