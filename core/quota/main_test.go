package quota_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The examples run against the Redis at REDIS_URL (127.0.0.1:6379 by
	// default); the tests that need the harness live in the core/test module.
	code := m.Run()
	if code == 0 {
		// go-redis re-dials a dead server in the background and notices a
		// closed pool only after its back-off sleep: not a leak of ours
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
