package faults_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/conformance/redistest"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The limiter's own process stopped while its confirmation probe waits:
// this process, not the store, missed the probe's deadline. Redis is
// paused (SIGSTOP) so that a check gets no reply and the limiter probes;
// while the probe waits, a child process stops this test process
// (SIGSTOP) for longer than the probe's deadline (1 s), then continues it;
// Redis is resumed a little later. The probe's deadline passed while this
// process could not run: no evidence that the store is down, so the check
// is shed (ReasonOverloaded), never answered by the failure policy, and the
// breaker stays closed. Before a late probe counted as inconclusive, the
// shard was marked down and the check failed open (or closed).
//
// Not parallel: stopping the process stops every test in it, and the
// testing package runs no parallel test beside a sequential one.
func TestProcessStoppedDuringProbe(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			srv := redistest.NewServer(t)
			lim := newLimiter(t, srv.Client(t), p)
			tenant := quota.Tenant{ID: "stopped"}
			waitDecided(t, lim, "a healthy server")

			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			resumed := false
			defer func() {
				if !resumed {
					_ = srv.Resume()
				}
			}()
			// the check times out at 100 ms and the probe is sent; at 400 ms
			// this process is stopped for 1.6 s, past the probe's 1 s deadline
			pid := strconv.Itoa(os.Getpid())
			stopper := exec.Command("sh", "-c", "sleep 0.4; kill -STOP "+pid+"; sleep 1.6; kill -CONT "+pid)
			if err := stopper.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stopper.Wait() }()

			type answer struct {
				d   core.Decision
				err error
			}
			got := make(chan answer, 1)
			go func() {
				d, err := lim.Allow(context.Background(), tenant, "default", 1)
				got <- answer{d, err}
			}()
			// Redis comes back 0.4 s after this process does: a second probe,
			// made on time, is answered
			time.Sleep(time.Until(paused.Add(2400 * time.Millisecond)))
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true
			var a answer
			select {
			case a = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the check did not end within 10 s")
			}
			if err := stopper.Wait(); err != nil {
				t.Fatalf("the stopping process: %v", err)
			}
			if time.Since(paused) < 2*time.Second {
				t.Fatalf("the process was not stopped: the check ended %v after the pause", time.Since(paused))
			}
			if a.d.Reason != core.ReasonOverloaded {
				t.Fatalf("a check whose probe missed its deadline while this process was stopped: %v (%v), want %v", a.d.Reason, a.err, core.ReasonOverloaded)
			}
			if a.d.Allowed {
				t.Fatal("a shed check was admitted")
			}
			// the shard was never marked down: the next check is the store's
			waitDecided(t, lim, "the check after the stop")
			d, err := lim.Allow(context.Background(), tenant, "default", 1)
			if err != nil || d.Reason != core.ReasonOK {
				t.Fatalf("after the stop: %v (%v), want %v", d.Reason, err, core.ReasonOK)
			}
			record(row{"Limiter's process stopped (SIGSTOP) past the probe's deadline", p, "503 (overloaded, shed): a probe this process could not run on time is no evidence; probed again, never the failure policy, circuit stays closed", 0})
		})
	}
}
