//go:build unix

package config_test

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/config"
)

// TestReloadOnSIGHUP: with polling far off, only the signal can apply the
// new file. Watch has registered the handler when it returns, so the signal
// cannot kill the test binary.
func TestReloadOnSIGHUP(t *testing.T) {
	path, r, _, logs := setup(t, config.WithPollInterval(time.Hour), config.WithSignals(syscall.SIGHUP))
	writeFile(t, path, version(5))
	time.Sleep(20 * time.Millisecond)
	if c, _, _ := classCap(t, r); c != 10 {
		t.Fatalf("applied without a signal: capacity %d", c)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP to apply version 5", func() bool { c, _, _ := classCap(t, r); return c == 15 })
	waitFor(t, "the reload to be logged", func() bool { return strings.Contains(logs.String(), "signal=hangup") })
}

// TestNoSignalsByDefault: a reloader given no WithSignals leaves SIGHUP to
// the program. The test takes SIGHUP itself (so that it cannot kill the
// binary) and checks that the signal reached it and applied nothing.
func TestNoSignalsByDefault(t *testing.T) {
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)
	path, r, _, _ := setup(t, config.WithPollInterval(time.Hour))
	writeFile(t, path, version(5))
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mine:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGHUP not delivered")
	}
	time.Sleep(50 * time.Millisecond)
	if c, _, _ := classCap(t, r); c != 10 {
		t.Fatalf("SIGHUP applied the file without WithSignals: capacity %d", c)
	}
}
