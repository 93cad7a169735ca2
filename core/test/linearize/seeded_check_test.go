package linearize_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tollgate-go/tollgate/conformance/redistest"
)

// maxHistories bounds the histories a seeded bug may take to be caught.
const maxHistories = 5

// flicker drops replies in short bursts: a client that retries then gets
// its answer from a second run of the command.
func flicker(t *testing.T, tg target, rs []*replica, unit time.Duration) []window {
	var ws []window
	for end := time.Now().Add(unit); time.Now().Before(end); {
		ws = append(ws, during(t, 3*time.Millisecond, func() error { tg.proxy.Set(redistest.DropReply); return nil },
			func() error { tg.proxy.Set(redistest.Pass); return nil }))
		time.Sleep(20 * time.Millisecond)
	}
	return ws
}

// TestSeededBugsAreCaught: each seeded broken client (seeded_test.go) is
// found not linearizable within maxHistories histories.
func TestSeededBugsAreCaught(t *testing.T) {
	unit := 500 * time.Millisecond
	skews := []time.Duration{0, -150 * time.Millisecond, 150 * time.Millisecond}
	for _, sc := range []scenario{
		{name: "getset", fault: noFault},
		{name: "clientclock", fault: noFault},
		{name: "replay", proxied: true, fault: flicker},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.options = func(c *config) { c.Client = sc.name }
			for n := 1; n <= maxHistories; n++ {
				tg := newStandalone(t)
				if sc.proxied {
					tg.proxy = redistest.NewFaultProxy(t, tg.server.Addr())
					tg.addrs = []string{tg.proxy.Addr()}
				}
				_, ops, faults := history(t, sc, tg, unit, func(i int, c *config) { c.Skew = skews[i] })
				start := time.Now()
				res, _ := linearizable(testQuota, ops, faults, 60*time.Second, false)
				report(t, sc.name, count(ops), time.Since(start))
				switch res {
				case porcupine.Illegal:
					t.Logf("%s: caught in history %d of at most %d", sc.name, n, maxHistories)
					return
				case porcupine.Unknown:
					t.Fatalf("%s: the check timed out", sc.name)
				}
			}
			t.Fatalf("%s: not caught in %d histories", sc.name, maxHistories)
		})
	}
}
