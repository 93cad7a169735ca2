package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Modes of a run.
const (
	ModeNaive   = "naive (retry on 429)"
	ModeWaiting = "waiting (tollgate)"
)

// Options configure one run.
type Options struct {
	// Workers is the number of worker processes; Goroutines, each one's
	// concurrent jobs.
	Workers, Goroutines int
	// Duration is how long each mode sends jobs.
	Duration time.Duration
	// Requests and Tokens are the upstream's quota: a token bucket of
	// requests and one of tokens.
	Requests, Tokens quota.Quota
	// Estimate is the tokens a job may use at most, reserved before the
	// call; a job's size is from Estimate/3 to Estimate, and the upstream
	// reports it in its answer.
	Estimate int64
	// RedisURL is the Redis the workers share; Prefix, their key prefix.
	RedisURL, Prefix string
}

// Validate reports a setting a run cannot use.
func (o Options) Validate() error {
	switch {
	case o.Workers < 1 || o.Goroutines < 1:
		return errors.New("workers and goroutines must be at least 1")
	case o.Duration <= 0:
		return errors.New("duration must be above 0")
	case o.Estimate < 3 || o.Estimate > o.Tokens.Capacity:
		return fmt.Errorf("estimate %d must be 3 to the tokens' capacity %d", o.Estimate, o.Tokens.Capacity)
	}
	if err := o.Requests.Validate(); err != nil {
		return fmt.Errorf("requests: %w", err)
	}
	if err := o.Tokens.Validate(); err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	return nil
}

// shared returns the quotas the workers share in Redis: the upstream's,
// less one request and one job's estimate of burst, which absorbs the
// calls' uneven way to the upstream (a call a few milliseconds late lands
// beside the next one).
func (o Options) shared() (requests, tokens quota.Quota) {
	requests, tokens = o.Requests, o.Tokens
	requests.Capacity = max(1, requests.Capacity-1)
	tokens.Capacity = max(o.Estimate, tokens.Capacity-o.Estimate)
	return requests, tokens
}

// Result is one mode's outcome, as the upstream counted it.
type Result struct {
	Mode       string
	Workers    int
	Jobs       int64         // jobs done: calls the upstream answered 200
	Calls      int64         // calls sent, 429s included
	TooMany    int64         // 429s
	TokensUsed int64         // tokens the upstream reported for the jobs done
	Elapsed    time.Duration // from the first call to the last
	// RequestsBound and TokensBound are capacity + rate x elapsed of the
	// upstream's quotas: the most it allows.
	RequestsBound, TokensBound float64
}

// Held reports whether the upstream never refused and the jobs stayed
// within both quotas.
func (r Result) Held() bool {
	return r.TooMany == 0 && float64(r.Jobs) <= r.RequestsBound && float64(r.TokensUsed) <= r.TokensBound
}

// Run runs the naive workers, then the waiting ones, each against a fresh
// stand-in upstream, and returns their results.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var out []Result
	for _, mode := range []string{ModeNaive, ModeWaiting} {
		r, err := runMode(ctx, o, mode)
		if err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runMode(ctx context.Context, o Options, mode string) (Result, error) {
	up := newUpstream(o.Requests, o.Tokens, o.Estimate)
	srv := httptest.NewServer(up)
	defer srv.Close()
	env := workerEnv{Mode: mode, Upstream: srv.URL, Options: o}
	b, err := json.Marshal(env)
	if err != nil {
		return Result{}, err
	}
	outs := make([][]byte, o.Workers)
	errs := make([]error, o.Workers)
	var wg sync.WaitGroup
	for i := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), workerRole+"="+string(b))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			outs[i], errs[i] = cmd.Output()
			if errs[i] != nil {
				errs[i] = fmt.Errorf("worker %d: %w: %s", i, errs[i], stderr.Bytes())
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	r := up.result()
	r.Mode, r.Workers = mode, o.Workers
	return r, nil
}

// workerRole is set in a worker process's environment: the run's settings
// as JSON. Started so, the command (or its test binary) is a worker.
const workerRole = "TOLLGATE_WORKERS_WORKER"

type workerEnv struct {
	Mode     string
	Upstream string
	Options  Options
}

// isWorker reports whether this process was started as a worker.
func isWorker() bool { return os.Getenv(workerRole) != "" }

// runWorker is a worker process: its goroutines do jobs, each one call to
// the upstream, until the run's time is up.
func runWorker() error {
	var env workerEnv
	if err := json.Unmarshal([]byte(os.Getenv(workerRole)), &env); err != nil {
		return err
	}
	o := env.Options
	w := &worker{url: env.Upstream, estimate: o.Estimate,
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.Goroutines}}}
	if env.Mode == ModeWaiting {
		opt, err := redis.ParseURL(o.RedisURL)
		if err != nil {
			return err
		}
		client := redis.NewClient(opt)
		defer client.Close()
		requests, tokens := o.shared()
		// one resolver: the "tokens" class is the tokens bucket, "requests"
		// the requests bucket
		res := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
			if class == "requests" {
				return []quota.Bucket{{Name: "requests", Quota: requests}}, nil
			}
			return []quota.Bucket{{Name: "tokens", Quota: tokens}}, nil
		})
		if w.lim, err = core.New(client, res, core.WithPrefix(o.Prefix), core.WithTimeout(time.Second)); err != nil {
			return err
		}
		defer w.lim.Close()
	}
	end := time.Now().Add(o.Duration)
	var wg sync.WaitGroup
	for range o.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				w.job()
			}
		}()
	}
	wg.Wait()
	return nil
}

// worker does jobs: calls to the upstream, waiting on the shared buckets
// first when it has a limiter, else retrying each 429.
type worker struct {
	url      string
	estimate int64
	hc       *http.Client
	lim      *core.Limiter // nil: naive
}

var tenant = quota.Tenant{ID: "org"}

func (w *worker) job() {
	// the job's size: the tokens the upstream will use for it, known to
	// the worker only from the upstream's answer
	size := w.estimate/3 + rand.Int64N(w.estimate-w.estimate/3+1)
	if w.lim == nil {
		for {
			status, _, err := w.call(size)
			if err != nil || status != http.StatusTooManyRequests {
				return
			}
			time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond) // back off, then retry
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a request, then the job's estimate of tokens: each wait is served in
	// the order the store granted it, across every worker
	d, err := w.lim.Wait(ctx, core.Request{Tenant: tenant, Class: "requests", Cost: 1})
	if err != nil || !d.Allowed {
		return
	}
	d, err = w.lim.Wait(ctx, core.Request{Tenant: tenant, Class: "tokens", Cost: w.estimate})
	if err != nil || !d.Allowed {
		return // the request's 1 stays charged: the call was not made, but the slot in time was taken
	}
	status, used, err := w.call(size)
	if err != nil || status != http.StatusOK {
		used = w.estimate // unknown: the estimate stands
	}
	// settle the tokens reservation with what the upstream reported using
	_, _ = w.lim.Settle(context.Background(), tenant, d, used)
}

// call makes one call of a job of size tokens and returns its status and
// the tokens it used.
func (w *worker) call(size int64) (status int, used int64, err error) {
	req, err := http.NewRequest(http.MethodPost, w.url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set(sizeHeader, strconv.FormatInt(size, 10))
	resp, err := w.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var body struct{ Usage int64 }
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&body)
	}
	return resp.StatusCode, body.Usage, err
}

// sizeHeader carries a job's size to the stand-in: what a provider would
// work out from the prompt and the answer it writes.
const sizeHeader = "X-Job-Tokens"

// upstream is the stand-in provider: a requests bucket and a tokens
// bucket, each exact on its arrivals. A call that both can pay for is
// answered 200 with the tokens it used (its job's size); any other is
// answered 429 and charged nothing.
type upstream struct {
	mu               sync.Mutex
	requests, tokens bucket
	estimate         int64
	first, last      time.Time
	res              Result
}

type bucket struct {
	q      quota.Quota
	tokens float64
	at     time.Time
}

func (b *bucket) refill(now time.Time) {
	if !b.at.IsZero() {
		b.tokens = min(float64(b.q.Capacity), b.tokens+now.Sub(b.at).Seconds()*b.q.RefillPerSecond)
	}
	b.at = now
}

func newUpstream(requests, tokens quota.Quota, estimate int64) *upstream {
	return &upstream{requests: bucket{q: requests, tokens: float64(requests.Capacity)},
		tokens: bucket{q: tokens, tokens: float64(tokens.Capacity)}, estimate: estimate}
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	used, err := strconv.ParseInt(r.Header.Get(sizeHeader), 10, 64)
	if err != nil || used < 0 || used > u.estimate {
		http.Error(w, "bad job size", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	now := time.Now()
	if u.first.IsZero() {
		u.first = now
	}
	u.last = now
	u.requests.refill(now)
	u.tokens.refill(now)
	u.res.Calls++
	ok := u.requests.tokens >= 1 && u.tokens.tokens >= float64(used)
	if ok {
		u.requests.tokens--
		u.tokens.tokens -= float64(used)
		u.res.Jobs++
		u.res.TokensUsed += used
	} else {
		u.res.TooMany++
	}
	u.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"usage":%d}`, used)
}

func (u *upstream) result() Result {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.res
	r.Elapsed = u.last.Sub(u.first)
	s := r.Elapsed.Seconds()
	r.RequestsBound = float64(u.requests.q.Capacity) + u.requests.q.RefillPerSecond*s
	r.TokensBound = float64(u.tokens.q.Capacity) + u.tokens.q.RefillPerSecond*s
	return r
}

// printTable writes the results side by side.
func printTable(w io.Writer, rs []Result) {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-22s %7s %8s %6s %6s %6s %6s %11s %12s %6s\n",
		"mode", "workers", "elapsed", "calls", "429s", "jobs", "bound", "tokens used", "tokens bound", "used")
	for _, r := range rs {
		fmt.Fprintf(bw, "%-22s %7d %8s %6d %6d %6d %6.0f %11d %12.0f %5.0f%%\n",
			r.Mode, r.Workers, r.Elapsed.Round(100*time.Millisecond), r.Calls, r.TooMany, r.Jobs, r.RequestsBound, r.TokensUsed, r.TokensBound,
			100*float64(r.TokensUsed)/r.TokensBound)
	}
	_ = bw.Flush()
}

func formatQuota(q quota.Quota) string {
	return strconv.FormatInt(q.Capacity, 10) + "+" + strconv.FormatFloat(q.RefillPerSecond, 'f', -1, 64) + "/s"
}
