package faults_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// The limiter's own process stopped while its confirmation probe waits:
// this process, not the store, missed the probe's deadline. Redis is
// paused (SIGSTOP) so that a check gets no reply and the limiter probes;
// while the probe waits, a child process stops this test process
// (SIGSTOP) past the probe's deadline (1 s after it was sent), then
// continues it; Redis is resumed a little later. The probe's deadline
// passed while this process could not run: no evidence that the store is
// down, so the check is shed (ReasonOverloaded), never answered by the
// failure policy, and the breaker stays closed.
//
// Two stops: one that ends long after the deadline (the probe's failure
// comes late), and one that ends just after it, so that the failure comes
// on time by the wall clock although the process could not run for most of
// the probe (as CPU starvation does: a dial or read whose deadline timer
// fires before the goroutine that would see the reply gets to run). Before
// a late probe counted as inconclusive, the first marked the shard down;
// before a probe counted only while this process ran on time, the second
// did.
//
// Not parallel: stopping the process stops every test in it, and the
// testing package runs no parallel test beside a sequential one.
func TestProcessStoppedDuringProbe(t *testing.T) {
	stops := []struct {
		name             string
		at, for_, resume time.Duration // after Redis is paused
	}{
		{"ending_long_after_the_deadline", 400 * time.Millisecond, 1600 * time.Millisecond, 2400 * time.Millisecond},
		{"ending_just_after_the_deadline", 400 * time.Millisecond, 900 * time.Millisecond, 1700 * time.Millisecond},
	}
	for _, stop := range stops {
		for _, p := range policies {
			t.Run(stop.name+"/"+p.String(), func(t *testing.T) {
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
				// this process is stopped, past the probe's 1 s deadline
				pid := strconv.Itoa(os.Getpid())
				secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
				stopper := exec.Command("sh", "-c", "sleep "+secs(stop.at)+"; kill -STOP "+pid+"; sleep "+secs(stop.for_)+"; kill -CONT "+pid)
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
				time.Sleep(time.Until(paused.Add(stop.resume)))
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
				if time.Since(paused) < stop.at+stop.for_ {
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
				if stop.name == stops[0].name {
					record(row{"Limiter's process stopped (SIGSTOP) past the probe's deadline", p, "503 (overloaded, shed): a probe this process could not run on time is no evidence; probed again, never the failure policy, circuit stays closed", 0})
				} else {
					record(row{"Limiter's process stopped (SIGSTOP) for most of the probe, resumed just past its deadline", p, "503 (overloaded, shed): a probe's failure counts only while this process ran on time; probed again, never the failure policy, circuit stays closed", 0})
				}
			})
		}
	}
}
