package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// accuracy is one boundary probe of one configuration through the
// balancer.
type accuracy struct {
	config   string
	admitted int64   // from the first request to the end of the burst
	elapsed  float64 // s, from the first request to the end of the burst
	burst    int64   // admitted during the burst
	burstDur float64 // s
	sent     int64
	other    int64 // answers neither 200 nor 429
	degraded int64 // limiter errors in the replicas during the probe
	// times are the admissions' arrival times at the prober, s from the
	// first request, sorted: the n-th was admitted by times[n-1]
	times []float64
}

// overshoot is what the configuration may admit over the bucket's bound
// in an interval that starts later than the probe: tollgate-leases' unspent
// leased tokens, at most one lease per replica.
func (a accuracy) overshoot() float64 {
	if a.config == "tollgate-leases" {
		return float64(*flagReplicas * leaseSize)
	}
	return 0
}

// firstOver is the first admission received above the bucket's bound at
// its arrival time, capacity + refill x t, or -1.
func (a accuracy) firstOver() int {
	for i, t := range a.times {
		if float64(i+1) > capacity+refill*t {
			return i
		}
	}
	return -1
}

// bound is what a token bucket of the quota may admit over the whole
// probe: capacity + refill x elapsed. redis_rate's GCRA has the same
// bound.
func (a accuracy) bound() float64 { return capacity + refill*a.elapsed }

// burstBound is the bucket's bound over the burst alone.
func (a accuracy) burstBound() float64 { return capacity + refill*a.burstDur }

// allowed is what the configuration's own algorithm admits over the probe:
// the bucket's bound, or for ulule's fixed window one limit per window the
// probe touched (two: the probe straddles one boundary).
func (a accuracy) allowed() float64 {
	if a.config == "ulule" {
		return 2 * capacity
	}
	return a.bound()
}

// probeLead is how long before ulule's window ends the burst starts, and
// how long after it it ends.
const probeLead = 500 * time.Millisecond

// accuracyRound probes every limited configuration at once, each through
// a balancer over its replicas, each with a fresh tenant.
func accuracyRound(ctx context.Context, cfgs []string, replicas map[string][]*proc, secret string, rep int) ([]accuracy, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var out []accuracy
	var firstErr error
	nonce := randomHex(4)
	for _, c := range cfgs {
		if !limits(c) {
			continue
		}
		url, stop, err := balancer(replicas[c])
		if err != nil {
			return nil, err
		}
		defer stop()
		token, err := mint([]byte(secret), fmt.Sprintf("acc-%s-%d-%s", c, rep, nonce), time.Hour)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			before, err := sumStats(replicas[c])
			if err == nil {
				var a accuracy
				a, err = probe(ctx, url+pathProfile, "Bearer "+token)
				var after served
				if err == nil {
					after, err = sumStats(replicas[c])
				}
				a.config, a.degraded = c, after.minus(before).degraded
				mu.Lock()
				out = append(out, a)
				mu.Unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("accuracy %s: %w", c, err)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for _, c := range cfgs { // report in the configurations' order
		for _, a := range out {
			if a.config == c {
				fmt.Printf("BenchmarkHTTPAccuracy/config=%s 1 %d admitted %.1f bucket-bound %.0f allowed %d burst-admitted %.1f burst-bucket-bound %d limiter-errors\n",
					c, a.admitted, a.bound(), a.allowed(), a.burst, a.burstBound(), a.degraded)
			}
		}
	}
	return out, nil
}

// probe sends one request, idles until probeLead before ulule's window
// would end, then drives the tenant with 32 workers until probeLead after
// it. The first request starts the window (and drains one token), so the
// burst straddles the boundary.
func probe(ctx context.Context, url, authorization string) (accuracy, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	var a accuracy
	var admitted, sent, other atomic.Int64
	var tmu sync.Mutex
	var times []float64
	var t0 time.Time
	send := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", authorization)
		sent.Add(1)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			at := time.Since(t0).Seconds()
			tmu.Lock()
			times = append(times, at)
			tmu.Unlock()
			admitted.Add(1)
		case http.StatusTooManyRequests:
		default:
			other.Add(1)
		}
		return nil
	}
	t0 = time.Now()
	if err := send(); err != nil {
		return a, err
	}
	select {
	case <-time.After(time.Until(t0.Add(window - probeLead))):
	case <-ctx.Done():
		return a, ctx.Err()
	}
	before := admitted.Load()
	b0 := time.Now()
	until := t0.Add(window + probeLead)
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				if err := send(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	close(errc)
	if err := <-errc; err != nil {
		return a, err
	}
	a.admitted, a.sent, a.other = admitted.Load(), sent.Load(), other.Load()
	slices.Sort(times)
	a.times = times
	a.burst = a.admitted - before
	a.elapsed, a.burstDur = end.Sub(t0).Seconds(), end.Sub(b0).Seconds()
	return a, nil
}

// sumStats adds up the replicas' counts.
func sumStats(ps []*proc) (served, error) {
	var t served
	for _, p := range ps {
		s, err := stats(p.addr)
		if err != nil {
			return t, err
		}
		t = served{t.ok + s.ok, t.limited + s.limited, t.other + s.other, t.degraded + s.degraded, t.gone + s.gone}
	}
	return t, nil
}
