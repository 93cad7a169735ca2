package core_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The examples run against the Redis at REDIS_URL (127.0.0.1:6379 by
// default); the tests that need the harness live in the core/test module.
// After a passing run, no goroutine of ours may be left; go-redis re-dials
// a dead server in the background and notices a closed pool only after its
// back-off sleep: not a leak of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
