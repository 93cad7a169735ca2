package config

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// whileRead runs f(attempt) in the middle of every read of a file, between
// the read and the check that the file did not change, for this test only.
func whileRead(t *testing.T, f func(attempt int)) {
	t.Helper()
	afterRead = f
	t.Cleanup(func() { afterRead = nil })
}

func write(t *testing.T, path, content string, flag int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// The first half of full is a valid file on its own: the one a reader
// sees when it reads while the writer is between its two writes.
const (
	half = `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
`
	full = half + `      export: {capacity: 10, refill_per_second: 0.1}
routes:
  - {method: POST, path: /v1/export, class: export, cost: 5}
`
)

// TestReadFileRereadsAFileChangedWhileRead: a file caught half-written (the
// writer appends the rest while it is read) is read again, whole; so is
// one renamed into place while the old one is read.
func TestReadFileRereadsAFileChangedWhileRead(t *testing.T) {
	if _, err := Parse("half.yaml", []byte(half)); err != nil {
		t.Fatalf("the half file must be valid on its own: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tiers.yaml")

	t.Run("appended", func(t *testing.T) {
		write(t, path, half, os.O_TRUNC)
		var attempts []int
		whileRead(t, func(attempt int) {
			attempts = append(attempts, attempt)
			if attempt == 0 {
				write(t, path, full[len(half):], os.O_APPEND)
			}
		})
		data, err := readFile(path)
		if err != nil || string(data) != full {
			t.Fatalf("readFile = %q, %v; want the whole file", data, err)
		}
		if len(attempts) != 2 {
			t.Errorf("read %d times, want 2 (attempts %v)", len(attempts), attempts)
		}
	})

	t.Run("renamed into place", func(t *testing.T) {
		write(t, path, half, os.O_TRUNC)
		whileRead(t, func(attempt int) {
			if attempt == 0 {
				write(t, path+".tmp", full, os.O_TRUNC)
				if err := os.Rename(path+".tmp", path); err != nil {
					t.Error(err)
				}
			}
		})
		if data, err := readFile(path); err != nil || string(data) != full {
			t.Fatalf("readFile = %q, %v; want the file renamed into place", data, err)
		}
	})

	t.Run("never settles", func(t *testing.T) {
		write(t, path, half, os.O_TRUNC)
		n := 0
		whileRead(t, func(attempt int) {
			n++
			write(t, path, strings.Repeat("#", n)+"\n", os.O_APPEND)
		})
		data, err := readFile(path)
		if err == nil || !errors.Is(err, core.ErrInvalidConfig) ||
			!strings.Contains(err.Error(), path+": the file changed while it was read, 3 times; write it to a temporary file and rename it into place") {
			t.Fatalf("readFile = %q, %v; want an error", data, err)
		}
		if n != maxReadAttempts {
			t.Errorf("read %d times, want %d", n, maxReadAttempts)
		}
	})
}

// TestReloadNeverAppliesAHalfWrittenFile: the reloader reads the file while
// the writer is between its two writes. It applies the whole file, never
// the valid half.
func TestReloadNeverAppliesAHalfWrittenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	write(t, path, half, os.O_TRUNC)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cfg.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []*Config
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl, err := Watch(ctx, path, r, WithPollInterval(time.Hour), WithReloadLogger(slog.New(slog.DiscardHandler)),
		WithOnReload(func(c *Config, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				applied = append(applied, c)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rl.Done() }()

	// The writer rewrites the file in place: truncate and write the first
	// half, then, while the reloader reads it, the rest.
	write(t, path, half, os.O_TRUNC)
	whileRead(t, func(attempt int) {
		if attempt == 0 {
			write(t, path, full[len(half):], os.O_APPEND)
		}
	})
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 2 || len(applied[1].Routes) != 1 {
		t.Fatalf("applied %d files; the last has routes %v; want the start file then the whole new one", len(applied), applied[len(applied)-1].Routes)
	}
	if bs, err := r.Buckets(context.Background(), quota.Tenant{ID: "t1"}, "export"); err != nil || len(bs) != 1 {
		t.Errorf("class export of the whole file: %+v, %v", bs, err)
	}
}
