package faults_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis re-dials a dead server in the background and notices a
	// closed pool only after its back-off sleep: not a leak of ours
	code := redistest.RunChecked(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	if code == 0 {
		if err := syncDoc(); err != nil {
			fmt.Fprintln(os.Stderr, "fault matrix:", err)
			code = 1
		}
	}
	os.Exit(code)
}
