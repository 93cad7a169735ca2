// Package redistest gives tests a real Redis: the shared standalone server,
// private servers a test may stop, pause and restart, a local Redis
// Cluster, and a fault-injecting TCP proxy ([FaultProxy]) to put between a
// client and any of them (latency, a reply lost after its command ran,
// resets, stalled reads, a blackhole). Every tollgate test that touches the Lua script runs through it,
// because the property under test is the script's atomicity, which a fake
// cannot show.
//
// The standalone server comes from, in order:
//
//  1. REDIS_URL, if set (redis://host:port/db); a REDIS_URL that does not
//     answer fails the test;
//  2. a private redis-server from PATH, on a free port in a temporary
//     directory, killed when the test binary exits.
//
// When neither is available the test fails under CI=true and skips
// otherwise, with [NoRedisMessage] either way. Private servers and the
// Cluster need redis-server on PATH; without it they fail under CI=true
// and skip otherwise.
//
// Tests share servers, so they isolate themselves with a random key prefix
// ([Prefix]) and never FLUSHDB or FLUSHALL. Every key a test leaves in the
// shared server has a TTL, and none is under the production prefix
// ([ProductionPrefix]): [Main] and [RunChecked] fail a run that breaks
// either rule ([CheckKeys]).
//
// Call [Main] from TestMain so that servers started for the package are
// stopped when it ends.
//
// [StartServer] is the same private server for code outside a test (the
// load drivers, dashshot): the tree starts redis-server in this package
// only.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NoRedisMessage is the failure (under CI=true) or skip reported when no
// Redis can be found.
const NoRedisMessage = "no Redis for the tests: set REDIS_URL or put redis-server on PATH"

// errNoRedis is findShared's error when neither REDIS_URL nor redis-server
// is there: a test skips on it outside CI, where any other error fails.
var errNoRedis = errors.New("REDIS_URL is not set and redis-server is not on PATH")

var (
	sharedOnce sync.Once
	sharedURL  string
	sharedErr  error

	cleanupMu sync.Mutex
	cleanups  []func()
)

func atExit(f func()) {
	cleanupMu.Lock()
	cleanups = append(cleanups, f)
	cleanupMu.Unlock()
}

// Main runs the package's tests, checks the keys they left in the shared
// Redis ([CheckKeys]), and then stops every server this package started for
// them. Use it as TestMain: func TestMain(m *testing.M) {
// redistest.Main(m) }.
func Main(m *testing.M) {
	os.Exit(finish(m.Run()))
}

// Shutdown stops every server started by this package.
func Shutdown() {
	background.Wait()
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// InCI reports whether the tests run under CI=true, where a missing
// dependency is a failure, never a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// SharedURL returns the shared standalone Redis URL, starting a server if
// needed, for code outside a test (TestMain, Example functions).
func SharedURL() (string, error) {
	sharedOnce.Do(func() { sharedURL, sharedErr = findShared() })
	if sharedErr != nil {
		return "", fmt.Errorf("%s (%w)", NoRedisMessage, sharedErr)
	}
	return sharedURL, nil
}

// URL returns the shared standalone Redis URL, starting a server if needed.
// With no Redis to be had (neither REDIS_URL nor redis-server) it fails the
// test under CI=true and skips it otherwise.
func URL(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() { sharedURL, sharedErr = findShared() })
	if errors.Is(sharedErr, errNoRedis) && !InCI() {
		t.Skipf("%s (skipped outside CI)", NoRedisMessage)
	}
	if sharedErr != nil {
		t.Fatalf("%s (%v)", NoRedisMessage, sharedErr)
	}
	return sharedURL
}

// Client returns a client of the shared standalone Redis, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("redistest: parse REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a random key prefix for one test, so that tests sharing a
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("redistest: random prefix: %v", err)
	}
	p := "test-" + hex.EncodeToString(b[:])
	notePrefix(p)
	return p
}

func findShared() (u string, err error) {
	defer func() {
		if err == nil {
			noteShared(u)
		}
	}()
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u, ping(u)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", errNoRedis
	}
	s, err := startServer(nil)
	if err != nil {
		return "", err
	}
	atExit(s.shutdown)
	return s.URL(), nil
}

func ping(u string) error {
	opt, err := redis.ParseURL(u)
	if err != nil {
		return fmt.Errorf("parse %q: %w", u, err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", opt.Addr, err)
	}
	return nil
}

// needBinary fails (CI) or skips the test when redis-server is not on PATH.
func needBinary(t testing.TB, what string) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	msg := what + " needs redis-server on PATH: " + err.Error()
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg + " (skipped outside CI)")
	return ""
}

// freePort returns a port that is free now, whose cluster bus port (+10000)
// is free too.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		if lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			_ = lb.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port pair found")
}
