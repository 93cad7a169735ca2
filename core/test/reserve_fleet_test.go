package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The wait fleet: 4 worker processes x 16 goroutines share one bucket
// (capacity 10, 50/s) through Limiter.Wait, and call a stand-in upstream
// that allows that (and the arrival jitter, see waitJitter) and answers 429
// above it.
const (
	waitUpstream = "TOLLGATE_WAIT_UPSTREAM" // the stand-in's URL, for a worker
	waitSeconds  = "TOLLGATE_WAIT_SECONDS"  // how long the workers run; 5 unless given to go test
	waitWorkers  = 4
	waitRoutines = 16
	waitCapacity = 10
	waitRate     = 50
	// waitJitter is how much later than its time a call may reach the
	// stand-in beyond the others: the reply's way back from the store and
	// the timer's lateness (the bound Reserve states), plus the stand-in's
	// own HTTP hop, on a quiet machine. Calls made exactly at the rate
	// arrive that unevenly, so the stand-in allows rate x waitJitter more
	// than capacity + rate x window (one call at 50/s), and rate x the
	// timer lateness measured on the machine during the run (probeLateness):
	// a loaded machine delays a call past its time, bunching it with the
	// next.
	waitJitter = 20 * time.Millisecond
)

var waitQuota = quota.Quota{Capacity: waitCapacity, RefillPerSecond: waitRate}

// waitResult is what a worker process reports on its last line.
type waitResult struct {
	Calls, OK, TooMany, Refused, Errors int64
}

// runWaiter is a worker process: 16 goroutines that each wait on the
// shared bucket, then call the stand-in, until the run's time is up. Each
// call names its reservation's store time (the grant order).
func runWaiter() int {
	client := fleetClient(os.Getenv)
	defer client.Close()
	lim, err := core.New(client, staticResolver(quota.Bucket{Name: "calls", Quota: waitQuota}),
		core.WithPrefix(os.Getenv(fleetPrefix)), core.WithTimeout(2*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	secs, _ := strconv.ParseFloat(os.Getenv(waitSeconds), 64)
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	url := os.Getenv(waitUpstream)
	// one kept connection per goroutine, opened before the run: a dial
	// delays a call past its time and bunches it with the next
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: waitRoutines}}
	var warm sync.WaitGroup
	for range waitRoutines {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if resp, err := hc.Get(url + "/warm"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	warm.Wait()
	var res waitResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range waitRoutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				d, err := lim.Wait(ctx, core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "calls", Cost: 1})
				cancel()
				if err != nil || !d.Allowed || d.Reason != core.ReasonOK {
					mu.Lock()
					if err != nil {
						res.Errors++
						fmt.Fprintln(os.Stderr, "wait:", err)
					} else {
						res.Refused++
					}
					mu.Unlock()
					continue
				}
				req, _ := http.NewRequest(http.MethodPost, url, nil)
				req.Header.Set("X-Grant", strconv.FormatInt(d.Buckets[0].Stamp.UnixMicro(), 10))
				resp, err := hc.Do(req)
				mu.Lock()
				res.Calls++
				switch {
				case err != nil:
					res.Errors++
				case resp.StatusCode == http.StatusTooManyRequests:
					res.TooMany++
				default:
					res.OK++
				}
				mu.Unlock()
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	_ = lim.Close()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// standIn is an upstream that allows capacity + rate x window in every
// window of its arrivals (an exact token bucket on them) and answers 429
// above it; it keeps every call it allowed.
type standIn struct {
	mu       sync.Mutex
	capacity float64
	rate     float64
	tokens   float64
	last     time.Time
	arrivals []arrival
	tooMany  atomic.Int64
	// late measures this machine's scheduling lateness during the run: a
	// call late by that much bunches with the next, so the stand-in allows
	// rate x that much more
	late *lateness
}

// lateness is the largest lateness of a 5 ms timer seen since start: how
// late a goroutine of a process on this machine can run while the test's
// processes share its cores. stop ends the probe.
type lateness struct {
	worst atomic.Int64 // nanoseconds
	stop  chan struct{}
	done  chan struct{}
}

func probeLateness() *lateness {
	l := &lateness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		const tick = 5 * time.Millisecond
		for {
			t0 := time.Now()
			select {
			case <-l.stop:
				return
			case <-time.After(tick):
			}
			if late := time.Since(t0) - tick; late > time.Duration(l.worst.Load()) {
				l.worst.Store(int64(late))
			}
		}
	}()
	return l
}

func (l *lateness) max() time.Duration { return time.Duration(l.worst.Load()) }

func (l *lateness) close() { close(l.stop); <-l.done }

type arrival struct {
	at    time.Time
	grant int64 // the reservation's store time, microseconds
}

func newStandIn(capacity, rate float64, late *lateness) *standIn {
	return &standIn{capacity: capacity, rate: rate, tokens: capacity, late: late}
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		return // a connection opened before the run, not a call
	}
	grant, _ := strconv.ParseInt(r.Header.Get("X-Grant"), 10, 64)
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() {
		s.tokens = min(s.capacity+s.rate*s.late.max().Seconds(), s.tokens+now.Sub(s.last).Seconds()*s.rate)
	}
	s.last = now
	ok := s.tokens >= 1
	if ok {
		s.tokens--
		s.arrivals = append(s.arrivals, arrival{now, grant})
	}
	s.mu.Unlock()
	if !ok {
		s.tooMany.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// TestWaitFleet: 4 processes x 16 goroutines wait on one bucket (10, 50/s)
// for ~5 s (TOLLGATE_WAIT_SECONDS=20 for the long run). The stand-in
// upstream never answers 429, so every window of its arrivals held at most
// capacity + rate x (window + waitJitter); the worst window is logged; the
// throughput is at least 0.95 x the rate;
// and the calls arrive in the order the store granted their reservations,
// out of it by no more than the reply's way back plus timer lateness.
func TestWaitFleet(t *testing.T) {
	secs := 5.0
	if s := os.Getenv(waitSeconds); s != "" {
		var err error
		if secs, err = strconv.ParseFloat(s, 64); err != nil || secs <= 0 {
			t.Fatalf("%s=%q: want seconds", waitSeconds, s)
		}
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			late := probeLateness()
			defer late.close()
			up := newStandIn(waitCapacity+waitRate*waitJitter.Seconds(), waitRate, late)
			srv := httptest.NewServer(up)
			defer srv.Close()
			env := fleetEnv(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			outs := make([][]byte, waitWorkers)
			errs := make([]error, waitWorkers)
			var wg sync.WaitGroup
			for i := range waitWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := replicaCmd(ctx, env, "waiter", waitUpstream+"="+srv.URL, waitSeconds+"="+strconv.FormatFloat(secs, 'f', -1, 64))
					outs[i], errs[i] = cmd.Output()
				}()
			}
			wg.Wait()
			var total waitResult
			for i := range waitWorkers {
				if errs[i] != nil {
					t.Fatalf("worker %d: %v\n%s", i, errs[i], outs[i])
				}
				lines := splitLines(outs[i])
				var r waitResult
				if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
					t.Fatalf("worker %d: %v in %q", i, err, outs[i])
				}
				total.Calls += r.Calls
				total.OK += r.OK
				total.TooMany += r.TooMany
				total.Refused += r.Refused
				total.Errors += r.Errors
			}
			up.mu.Lock()
			arr := slices.Clone(up.arrivals)
			up.mu.Unlock()
			if total.TooMany != 0 || up.tooMany.Load() != 0 || total.Errors != 0 {
				t.Errorf("workers: %+v; the stand-in answered %d 429s", total, up.tooMany.Load())
			}
			if len(arr) < 2 {
				t.Fatalf("%d arrivals", len(arr))
			}
			// every window [i, j] of arrivals: at most capacity + rate x its
			// length, and the jitter and the lateness measured
			slack := waitRate * (waitJitter + late.max()).Seconds()
			worst := -1e9
			for i := range arr {
				for j := i; j < len(arr); j++ {
					over := float64(j-i+1) - (waitCapacity + waitRate*arr[j].at.Sub(arr[i].at).Seconds())
					worst = max(worst, over)
				}
			}
			if worst > slack {
				t.Errorf("a window of arrivals held %.2f more than capacity + rate x window, above the jitter and lateness's %.2f (lateness %v)", worst, slack, late.max())
			}
			elapsed := arr[len(arr)-1].at.Sub(arr[0].at)
			rate := float64(len(arr)-waitCapacity) / elapsed.Seconds()
			if rate < 0.95*waitRate {
				t.Errorf("throughput %.2f/s after the first %d, want >= %.2f/s", rate, waitCapacity, 0.95*waitRate)
			}
			// order: a call granted before another arrives after it, or
			// before it by at most the inversion measured here
			byGrant := slices.Clone(arr)
			slices.SortStableFunc(byGrant, func(a, b arrival) int { return int(a.grant - b.grant) })
			var inversion time.Duration
			var latest time.Time // the latest arrival among strictly earlier grants
			for i := 0; i < len(byGrant); {
				j := i
				for j < len(byGrant) && byGrant[j].grant == byGrant[i].grant {
					if !latest.IsZero() {
						inversion = max(inversion, latest.Sub(byGrant[j].at))
					}
					j++
				}
				for _, a := range byGrant[i:j] {
					if a.at.After(latest) {
						latest = a.at
					}
				}
				i = j
			}
			// the bound stated: the reply's way back (under the 2 s check
			// timeout) plus timer lateness, on a machine the test shares
			if inversion > 2*time.Second {
				t.Errorf("a call arrived %v before one granted earlier", inversion)
			}
			t.Logf("%s: %.1f s, %d arrivals (%+v), throughput %.2f/s (rate %d), worst window %+.2f tokens over the bound, largest order inversion %v, largest timer lateness on the machine %v",
				b.name, elapsed.Seconds(), len(arr), total, rate, waitRate, worst, inversion, late.max())
		})
	}
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}
