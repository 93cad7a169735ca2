package linearize_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tollgate-go/tollgate/core"
)

// replica is a running replica process.
type replica struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    chan []byte // the stdout lines
	stderr bytes.Buffer
}

// replicas and goroutines per replica.
const (
	nReplicas  = 3
	goroutines = 8
)

// startReplicas starts the replicas with cfg (ID set per replica) and waits
// until each has its client.
func startReplicas(t *testing.T, cfg config, tweak func(i int, c *config)) []*replica {
	t.Helper()
	rs := make([]*replica, nReplicas)
	for i := range rs {
		c := cfg
		c.ID = i
		if tweak != nil {
			tweak(i, &c)
		}
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{cmd: exec.Command(os.Args[0]), out: make(chan []byte, 4)}
		r.cmd.Env = append(os.Environ(), replicaEnv+"="+string(raw))
		r.cmd.Stderr = &r.stderr
		if r.stdin, err = r.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := r.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if r.cmd.ProcessState == nil {
				_ = r.cmd.Process.Kill()
				_ = r.cmd.Wait()
			}
		})
		go func() {
			defer close(r.out)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<30)
			for sc.Scan() {
				r.out <- bytes.Clone(sc.Bytes())
			}
		}()
		rs[i] = r
	}
	for i, r := range rs {
		if line := r.next(t, 30*time.Second); string(line) != "ready" {
			t.Fatalf("replica %d: %q, want ready; stderr: %s", i, line, r.stderr.String())
		}
	}
	return rs
}

func (r *replica) next(t *testing.T, within time.Duration) []byte {
	t.Helper()
	select {
	case line, ok := <-r.out:
		if !ok {
			_ = r.cmd.Wait()
			t.Fatalf("replica exited: %v; stderr: %s", r.cmd.ProcessState, r.stderr.String())
		}
		return line
	case <-time.After(within):
		t.Fatalf("replica silent for %v; stderr: %s", within, r.stderr.String())
	}
	return nil
}

func (r *replica) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		t.Fatalf("replica: %v", err)
	}
}

// stopReplicas stops them and returns their histories, merged.
func stopReplicas(t *testing.T, rs []*replica, timeout time.Duration) []op {
	t.Helper()
	for _, r := range rs {
		r.send(t, "stop")
	}
	var all []op
	for i, r := range rs {
		// every check ends within its bounds (the timeout, a probe, the
		// local budget): a replica stops within a few of those
		line := r.next(t, 20*timeout+30*time.Second)
		var h []op
		if err := json.Unmarshal(line, &h); err != nil {
			t.Fatalf("replica %d: history: %v", i, err)
		}
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("replica %d: %v; stderr: %s", i, err, r.stderr.String())
		}
		all = append(all, h...)
	}
	return all
}

// window is a time a fault was in force, wall clock ns.
type window struct{ from, to int64 }

// grace is how long after its return, or after the end of the fault it
// overlapped, an ambiguous call may still run: a command in a paused
// server's socket runs when it resumes; one the proxy forwarded, when it
// arrives.
const grace = 250 * time.Millisecond

// extend sets each ambiguous op's (and failed settle's) extension: its command may run until
// grace after the later of its return and the end of every fault window
// it overlapped.
func extend(ops []op, faults []window) {
	for i := range ops {
		o := &ops[i]
		if (o.Kind != ambiguous && o.Kind != settleFailed) || o.NotSent {
			continue
		}
		end := o.Return
		for _, w := range faults {
			if w.from <= o.Return && o.Call <= w.to {
				end = max(end, w.to)
			}
		}
		o.Extension = end - o.Return + int64(grace)
	}
}

// tally counts a history's operations by what answered them.
type tally struct {
	ops                                  int
	admitted, denied, localDenied        int
	ambiguous, notSent, leased           int
	failedOpen, failedClosed, overloaded int
	fallbackAdmitted, fallbackDenied     int
	// the mixes' operations: checks of both classes, denials for lack of
	// a slot, slots released, settles answered and failed
	multi, slotDenied, released int
	settled, settleFailed       int
	// reservations granted, refused and failed (Mix "reserve")
	reserved, reserveDenied, reserveFailed, cancelled int
}

func (c tally) String() string {
	s := fmt.Sprintf("%d ops: %d admitted by the store, %d from a lease, %d denied by the store, %d denied by the deny cache; degraded: %d sent (charged once or not), %d not sent; failed_open %d, failed_closed %d, overloaded %d, fallback %d admitted / %d denied",
		c.ops, c.admitted, c.leased, c.denied, c.localDenied, c.ambiguous, c.notSent, c.failedOpen, c.failedClosed, c.overloaded, c.fallbackAdmitted, c.fallbackDenied)
	if c.multi+c.slotDenied+c.released+c.settled+c.settleFailed > 0 {
		s += fmt.Sprintf("; %d checks of both classes, %d denied for lack of a slot, %d slots released, %d settled, %d settles failed",
			c.multi, c.slotDenied, c.released, c.settled, c.settleFailed)
	}
	if c.reserved+c.reserveDenied+c.reserveFailed > 0 {
		s += fmt.Sprintf("; reservations: %d granted, %d refused, %d failed, %d cancelled", c.reserved, c.reserveDenied, c.reserveFailed, c.cancelled)
	}
	return s
}

// add adds o's counts to c.
func (c *tally) add(o tally) {
	c.ops += o.ops
	c.admitted += o.admitted
	c.denied += o.denied
	c.localDenied += o.localDenied
	c.ambiguous += o.ambiguous
	c.notSent += o.notSent
	c.leased += o.leased
	c.failedOpen += o.failedOpen
	c.failedClosed += o.failedClosed
	c.overloaded += o.overloaded
	c.fallbackAdmitted += o.fallbackAdmitted
	c.fallbackDenied += o.fallbackDenied
	c.multi += o.multi
	c.slotDenied += o.slotDenied
	c.released += o.released
	c.settled += o.settled
	c.settleFailed += o.settleFailed
	c.reserved += o.reserved
	c.reserveDenied += o.reserveDenied
	c.reserveFailed += o.reserveFailed
	c.cancelled += o.cancelled
}

func count(ops []op) tally {
	var c tally
	c.ops = len(ops)
	for _, o := range ops {
		if o.Cost > 0 && o.AlsoCost > 0 && o.Kind != settled && o.Kind != settleFailed {
			c.multi++
		}
		switch o.Kind {
		case admitted:
			c.admitted++
		case denied:
			c.denied++
		case localDenied:
			c.localDenied++
		case slotDenied:
			c.slotDenied++
		case released:
			c.released++
		case settled:
			c.settled++
		case settleFailed:
			c.settleFailed++
		case reserved:
			c.reserved++
		case reserveDenied:
			c.reserveDenied++
		case reserveFailed:
			c.reserveFailed++
		case cancelled:
			c.cancelled++
		case leased:
			c.leased++
		case ambiguous:
			if o.NotSent {
				c.notSent++
			} else {
				c.ambiguous++
			}
		}
		switch {
		case o.Fallback && o.Allowed:
			c.fallbackAdmitted++
		case o.Fallback:
			c.fallbackDenied++
		case o.Reason == core.ReasonFailedOpen.String():
			c.failedOpen++
		case o.Reason == core.ReasonFailedClosed.String():
			c.failedClosed++
		case o.Reason == core.ReasonOverloaded.String():
			c.overloaded++
		}
	}
	return c
}

// linearizable checks a history against the model; it returns porcupine's
// verdict and, when it is not Ok, a description of the longest
// linearizable prefix of the failing partition.
func linearizable(q quotas, ops []op, faults []window, timeout time.Duration, visualize bool) (porcupine.CheckResult, string) {
	extend(ops, faults)
	m := model(q)
	res, info := porcupine.CheckOperationsVerbose(m, operations(q, ops), timeout)
	if res == porcupine.Ok || !visualize {
		return res, ""
	}
	f, err := os.CreateTemp("", "linearize-*.html")
	if err != nil {
		return res, err.Error()
	}
	defer f.Close()
	if err := porcupine.Visualize(m, info, f); err != nil {
		return res, err.Error()
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return res, err.Error()
	}
	dump := strings.TrimSuffix(f.Name(), ".html") + ".json"
	if err := os.WriteFile(dump, raw, 0o644); err != nil {
		return res, err.Error()
	}
	return res, "visualization: " + f.Name() + ", history: " + dump
}

// degradedBounds checks the degraded answers against their own stated
// bounds: the failure policy's answer is the policy's (a reservation's
// too, local fallback or not); shed checks are
// never admitted; a replica's local fallback admits a tenant at most its
// share of the quota over each outage (a stretch of fallback answers with
// no store answer of that tenant between them).
func degradedBounds(cfg config, ops []op) []string {
	var bad []string
	type rk struct {
		r int
		k string
	}
	by := map[rk][]op{}
	for _, o := range ops {
		switch {
		case o.Fallback:
		case o.Cost > 0 && o.AlsoCost > 0 && o.Cost != o.AlsoCost && cfg.Fallback > 0,
			o.Kind == reserveFailed && cfg.Fallback > 0:
			// a request whose classes cost differently, or a reservation:
			// the local fallback never answers it, the failure policy does
			if o.Reason == core.ReasonFailedOpen.String() && (cfg.Policy != core.FailOpen || !o.Allowed) ||
				o.Reason == core.ReasonFailedClosed.String() && (cfg.Policy != core.FailClosed || o.Allowed) {
				bad = append(bad, fmt.Sprintf("%s under policy %v, costs %d and %d: %+v", o.Reason, cfg.Policy, o.Cost, o.AlsoCost, o))
			}
		case o.Reason == core.ReasonFailedOpen.String() && (cfg.Policy != core.FailOpen || cfg.Fallback > 0 || !o.Allowed):
			bad = append(bad, fmt.Sprintf("failed_open under policy %v (fallback %v): %+v", cfg.Policy, cfg.Fallback, o))
		case o.Reason == core.ReasonFailedClosed.String() && (cfg.Policy != core.FailClosed || cfg.Fallback > 0 || o.Allowed):
			bad = append(bad, fmt.Sprintf("failed_closed under policy %v (fallback %v): %+v", cfg.Policy, cfg.Fallback, o))
		case o.Reason == core.ReasonOverloaded.String() && o.Allowed:
			bad = append(bad, fmt.Sprintf("a shed check admitted: %+v", o))
		}
		by[rk{o.Replica, o.Key}] = append(by[rk{o.Replica, o.Key}], o)
	}
	if cfg.Lease > 0 {
		for _, tenant := range cfg.Tenants {
			bad = append(bad, leaseBound(cfg, tenant, ops)...)
		}
	}
	if cfg.Fallback == 0 {
		return bad
	}
	localCap := max(1, float64(cfg.Capacity)*cfg.Fallback)
	localRate := cfg.Rate * cfg.Fallback
	for k, h := range by {
		sort.Slice(h, func(i, j int) bool { return h[i].Call < h[j].Call })
		n, from, to := 0, int64(0), int64(0)
		flush := func() {
			if n == 0 {
				return
			}
			bound := localCap + localRate*float64(to-from)/1e9
			if float64(n) > bound+1e-9 {
				bad = append(bad, fmt.Sprintf("replica %d, tenant %s: %d tokens admitted by the fallback in %v, bound %.2f",
					k.r, k.k, n, time.Duration(to-from), bound))
			}
			n = 0
		}
		for _, o := range h {
			switch {
			case o.Fallback && o.Allowed:
				if n == 0 {
					from = o.Call
				}
				n += int(o.Cost)
				to = o.Return
			case o.Kind == admitted || o.Kind == denied:
				flush()
			}
		}
		flush()
	}
	return bad
}

// durationFromEnv is LINEARIZE_DURATION (make linearize): how long
// TestLinearizable repeats its histories; 0 (unset) runs each once.
func durationFromEnv(t *testing.T) time.Duration {
	s := os.Getenv("LINEARIZE_DURATION")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("LINEARIZE_DURATION=%q: want a positive Go duration", s)
	}
	return d
}

// report logs one history's outcome.
func report(t *testing.T, name string, c tally, took time.Duration) {
	t.Helper()
	t.Logf("%s: %s; checked in %v", name, c, took.Round(time.Millisecond))
}

// leaseBound checks the leases' stated bound on one tenant's admissions
// (by the store or from a lease, every replica's): in any window, at most
// the bucket's allowance (capacity + rate × length) plus the tokens leased
// and not yet spent, at most replicas × lease size.
func leaseBound(cfg config, tenant string, ops []op) []string {
	var adm []op
	for _, o := range ops {
		if o.Key == tenant && (o.Kind == admitted || o.Kind == leased) {
			adm = append(adm, o)
		}
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].Call < adm[j].Call })
	extra := float64(nReplicas * cfg.Lease)
	for i := range adm {
		// the admissions inside [adm[i].Call, end], by end
		inside := make([]op, 0, len(adm)-i)
		inside = append(inside, adm[i:]...)
		sort.Slice(inside, func(a, b int) bool { return inside[a].Return < inside[b].Return })
		var n int64
		for _, o := range inside {
			n += o.Cost
			length := float64(o.Return-adm[i].Call) / 1e9
			if bound := float64(cfg.Capacity) + cfg.Rate*length + extra; float64(n) > bound+1e-9 {
				return []string{fmt.Sprintf("tenant %s: %d tokens admitted in %.6fs from %d, bound %.2f", tenant, n, length, adm[i].Call, bound)}
			}
		}
	}
	return nil
}
