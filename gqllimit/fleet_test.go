package gqllimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/redistest"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/gqllimit"
)

// The fleet test runs replicas as real processes: this test binary,
// started again with fleetRole set, runs runReplica from TestMain instead
// of the tests.
const (
	fleetRole    = "GQLLIMIT_FLEET_ROLE"
	fleetRedis   = "GQLLIMIT_FLEET_REDIS"
	fleetPrefix  = "GQLLIMIT_FLEET_PREFIX"
	fleetQueries = "GQLLIMIT_FLEET_QUERIES" // per replica
)

const (
	fleetReplicas   = 4
	fleetGoroutines = 6
	fleetCapacity   = 400
	fleetRows       = 5 // each list returns at most this many
)

// fleetResult is what a replica prints on its last line.
type fleetResult struct {
	Admitted, Denied, Errors int64
	Actual, Requested        int64 // summed over admitted queries, as extensions.cost said
}

// runReplica is one replica: its own limiter, gate, extension and server
// over the shared Redis, and goroutines sending queries whose lists ask
// for 1 to 20 rows and get at most fleetRows.
func runReplica() int {
	opt, err := redis.ParseURL(os.Getenv(fleetRedis))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := redis.NewClient(opt)
	defer c.Close()
	s, err := buildStack(c, stackOpts{quota: slow(fleetCapacity), rows: fleetRows, prefix: os.Getenv(fleetPrefix)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.lim.Close()
	n, _ := strconv.Atoi(os.Getenv(fleetQueries))
	var (
		mu  sync.Mutex
		res fleetResult
		wg  sync.WaitGroup
	)
	for g := range fleetGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			for range n / fleetGoroutines {
				first := 1 + rng.IntN(20)
				a, err := s.do(usersQuery, map[string]any{"n": first})
				mu.Lock()
				switch {
				case err != nil:
					res.Errors++
					fmt.Fprintln(os.Stderr, err)
				case a.code() == gqllimit.CodeThrottled:
					res.Denied++
				case len(a.Errors) > 0 || a.Extensions.Cost == nil || a.Extensions.Cost.ActualQueryCost == nil:
					res.Errors++
					fmt.Fprintf(os.Stderr, "unexpected answer %+v\n", a)
				default:
					res.Admitted++
					res.Actual += *a.Extensions.Cost.ActualQueryCost
					res.Requested += a.Extensions.Cost.RequestedQueryCost
					if want := usersCost(int64(min(first, fleetRows))); *a.Extensions.Cost.ActualQueryCost != want {
						res.Errors++
						fmt.Fprintf(os.Stderr, "actual cost %d, want %d\n", *a.Extensions.Cost.ActualQueryCost, want)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// Four processes sending queries at once keep the admissions within the
// bucket's bound counted in actual cost: what they were charged in the end
// is what the bucket lost, and no more than it could give.
func TestFleetWithinBound(t *testing.T) {
	p := redistest.Prefix(t)
	c := redistest.Client(t)
	obs := newStack(t, c, stackOpts{quota: slow(fleetCapacity), rows: fleetRows, prefix: p})
	const perReplica = 60
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []fleetResult
	)
	// while they run, the bucket never goes below zero: what the settled
	// operations cost plus the reservations outstanding never exceeds what
	// the bucket held
	lowest, samples := math.Inf(1), 0
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(2 * time.Millisecond): // pacing, not a bound
			}
			d, err := obs.lim.Peek(ctx, obs.tenant, gqllimit.DefaultClass)
			if err == nil {
				lowest, samples = min(lowest, d.Tokens), samples+1
			}
		}
	}()
	for range fleetReplicas {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fleetRole+"=replica", fleetRedis+"="+redistest.URL(t), fleetPrefix+"="+p,
				fleetQueries+"="+strconv.Itoa(perReplica))
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Errorf("replica: %v\n%s", err, errb.String())
				return
			}
			lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
			var r fleetResult
			if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
				t.Errorf("replica output %q: %v", out.String(), err)
				return
			}
			if errb.Len() > 0 {
				t.Logf("replica stderr: %s", errb.String())
			}
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(sampling)
	<-sampled
	elapsed := time.Since(start)
	if samples == 0 || lowest < -1e-9 {
		t.Errorf("the bucket's lowest balance over %d samples during the run: %.4f, want at least 0", samples, lowest)
	}
	if t.Failed() {
		return
	}
	var sum fleetResult
	for _, r := range results {
		sum.Admitted += r.Admitted
		sum.Denied += r.Denied
		sum.Errors += r.Errors
		sum.Actual += r.Actual
		sum.Requested += r.Requested
	}
	t.Logf("%d replicas in %v: %+v; lowest balance %.4f over %d samples", fleetReplicas, elapsed.Round(time.Millisecond), sum, lowest, samples)
	if sum.Errors > 0 {
		t.Fatalf("%d errors", sum.Errors)
	}
	if sum.Denied == 0 || sum.Admitted == 0 {
		t.Fatalf("admitted %d, denied %d: the bucket was never exhausted, or never admitted", sum.Admitted, sum.Denied)
	}
	refill := slow(fleetCapacity).RefillPerSecond * time.Since(start).Seconds()
	if bound := float64(fleetCapacity) + refill; float64(sum.Actual) > bound {
		t.Fatalf("admitted %d tokens of actual cost, above the bound %.3f", sum.Actual, bound)
	}
	// every reservation is settled: the bucket lost exactly the actual
	// costs (a refund cannot be capped, as no balance plus its own refund
	// exceeds the capacity at this refill)
	left := obs.tokens(t)
	if want := float64(fleetCapacity - sum.Actual); left < want-1e-6 || left > want+refill+1e-6 {
		t.Fatalf("the bucket holds %.4f, want %.0f (capacity less the actual costs) plus at most %.4f of refill", left, want, refill)
	}
}
