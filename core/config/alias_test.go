package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
)

// aliasBomb returns a tier file of about size bytes in which every tier is
// an alias of one tier whose classes are all aliases of one quota: n tiers
// of m classes, n*m quotas, from n+m short lines.
func aliasBomb(size int) string {
	var b strings.Builder
	b.WriteString("default_tier: t0\ntiers:\n  t0: &t\n    classes:\n      c0: &q {capacity: 1, refill_per_second: 1}\n")
	for i := 1; b.Len() < size/2; i++ {
		fmt.Fprintf(&b, "      c%d: *q\n", i)
	}
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  t%d: *t\n", i)
	}
	return b.String()
}

// TestParseRefusesAnAliasBomb: a 134 KB file whose aliases stand for tens
// of millions of nodes is refused with a clear error, in a few megabytes,
// instead of being expanded until the process runs out of memory.
func TestParseRefusesAnAliasBomb(t *testing.T) {
	bomb := aliasBomb(134 << 10)
	if n := len(bomb); n < 130<<10 || n > 140<<10 {
		t.Fatalf("bomb is %d bytes", n)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	cfg, err := config.Parse("bomb.yaml", []byte(bomb))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("alias bomb accepted: %d tiers", len(cfg.Tiers.Tiers))
	}
	if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "bomb.yaml: aliases expand the file to more than 1048576 YAML nodes") {
		t.Errorf("Parse = %.500v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("refusing the bomb allocated %d MiB", alloc>>20)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusing the bomb took %v", d)
	}

	// The same file reloaded is refused, and the tiers in force stay.
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	writeFile(t, path, version(0))
	good, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := good.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl, err := config.Watch(ctx, path, r, config.WithPollInterval(time.Hour), config.WithReloadLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rl.Done() }()
	writeAtomic(t, path, bomb)
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), "aliases expand the file") {
		t.Errorf("Reload of the bomb = %.500v", err)
	}
	if c, _, err := classCap(t, r); err != nil || c != 10 {
		t.Errorf("after the bomb: capacity %d, %v; want 10", c, err)
	}
}

// TestParseAliasesWithinBounds: aliases that share a value a few times are
// followed as before, and an alias inside the node it names is an error,
// never a hang.
func TestParseAliasesWithinBounds(t *testing.T) {
	cfg, err := config.Parse("ok.yaml", []byte(`default_tier: free
tiers:
  free: &free
    classes:
      default: &q {capacity: 20, refill_per_second: 2}
      export: *q
  pro: *free
  team: *free
`))
	if err != nil || len(cfg.Tiers.Tiers) != 3 || cfg.Tiers.Tiers["team"].Classes["export"].Capacity != 20 {
		t.Fatalf("Parse = %+v, %v", cfg, err)
	}
	_, err = config.Parse("loop.yaml", []byte("default_tier: free\ntiers: &t\n  free:\n    classes: *t\n"))
	if err == nil || !strings.Contains(err.Error(), "loop.yaml:4: alias *t is inside the node it names") {
		t.Errorf("Parse of a self-referencing alias = %v", err)
	}
}
