package linearize_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tollgate-go/tollgate/internal/redistest"
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
		{name: "lenient", fault: noFault},
		{name: "slots", fault: noFault, options: slotsMix},
		{name: "settle", fault: noFault, options: settleMix},
		{name: "reserve", fault: noFault, options: reserveMix},
		{name: "replay", proxied: true, fault: flicker},
	} {
		t.Run(sc.name, func(t *testing.T) {
			if !sc.proxied {
				// the histories without a timed fault run side by side:
				// what catches their bugs is contention, not timing
				t.Parallel()
			}
			mix := sc.options
			sc.options = func(c *config) {
				if mix != nil {
					mix(c)
				}
				c.Client = sc.name
			}
			for n := 1; n <= maxHistories; n++ {
				tg := newStandalone(t)
				if sc.proxied {
					tg.proxy = redistest.NewFaultProxy(t, tg.server.Addr())
					tg.addrs = []string{tg.proxy.Addr()}
				}
				cfg, ops, faults := history(t, sc, tg, unit, func(i int, c *config) { c.Skew = skews[i] })
				start := time.Now()
				res, _ := linearizable(cfg.quotas(), ops, faults, 60*time.Second, false)
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

// TestSeededControls: the seeded clients whose bug is a broken script
// pass with the script unbroken: what the checker catches is the bug, not
// the client.
func TestSeededControls(t *testing.T) {
	for _, sc := range []scenario{
		{name: "lenient"},
		{name: "slots", options: slotsMix},
		{name: "settle", options: settleMix},
		{name: "reserve", options: reserveMix},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			mix := sc.options
			sc.fault = noFault
			sc.options = func(c *config) {
				if mix != nil {
					mix(c)
				}
				c.Client, c.Control = sc.name, true
			}
			cfg, ops, faults := history(t, sc, newStandalone(t), 500*time.Millisecond, nil)
			c := check(t, sc.name, cfg, ops, faults)
			t.Logf("%s, unbroken: linearizable (%s)", sc.name, c)
		})
	}
}
