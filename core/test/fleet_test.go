package core_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// The fleet tests run replicas as real processes: this test binary,
// started again with fleetRole set, runs runReplica from TestMain instead
// of the tests.
const (
	fleetRole     = "TOLLGATE_FLEET_ROLE" // "replica" or "holder"
	fleetRedis    = "TOLLGATE_FLEET_REDIS"
	fleetCluster  = "TOLLGATE_FLEET_CLUSTER" // comma-separated Cluster addresses
	fleetPrefix   = "TOLLGATE_FLEET_PREFIX"
	fleetRequests = "TOLLGATE_FLEET_REQUESTS" // per replica; the fleet test's total when given to go test
	fleetLease    = "TOLLGATE_FLEET_LEASE"
)

const (
	fleetN          = 8  // the tenant's concurrency limit
	fleetReplicas   = 4  // processes
	fleetGoroutines = 64 // per process
	// fleetDefaultTotal keeps the run well under a minute on a loaded
	// machine; TOLLGATE_FLEET_REQUESTS=100000 (make test-fleet) is the full run
	fleetDefaultTotal = 8000
)

// fleetQuota: a rate quota that never binds, and N in flight.
var fleetQuota = quota.Quota{Capacity: 1 << 30, RefillPerSecond: 1 << 30, Concurrency: fleetN}

// replicaResult is what a replica reports on its last line of output.
type replicaResult struct {
	Requests, Admitted, Denied, Errors int64
	Peak                               int64   // the most handlers in flight fleet-wide, as a handler saw on entry
	Samples                            []int64 // in flight on each handler's entry
}

func fleetClient(env func(string) string) redis.UniversalClient {
	if addrs := env(fleetCluster); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	}
	opt, err := redis.ParseURL(env(fleetRedis))
	if err != nil {
		panic(err)
	}
	return redis.NewClient(opt)
}

// runReplica is a replica process: a limiter, and 64 goroutines sending
// requests of tenant t1 whose handlers take 20-80 ms and count, in Redis,
// how many run at once across the fleet (counted after the slot is taken,
// uncounted before it is released: the count never exceeds the slots
// held). A holder takes N slots and holds them until it is killed.
func runReplica() int {
	client := fleetClient(os.Getenv)
	defer client.Close()
	lease, _ := time.ParseDuration(os.Getenv(fleetLease))
	opts := []core.Option{core.WithPrefix(os.Getenv(fleetPrefix)), core.WithTimeout(2 * time.Second)}
	if lease > 0 {
		opts = append(opts, core.WithTimeout(lease/4), core.WithConcurrencySlots(lease, 0))
	}
	lim, err := core.New(client, staticResolver(quota.Bucket{Name: "reports", Quota: fleetQuota}), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	req := core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "reports", Cost: 1}
	if os.Getenv(fleetRole) == "holder" {
		for held := 0; held < fleetN; {
			d, err := lim.Check(ctx, req)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			if d.Allowed {
				held++
			}
		}
		fmt.Println("held")
		select {} // until kill -9
	}
	total, _ := strconv.ParseInt(os.Getenv(fleetRequests), 10, 64)
	counter := os.Getenv(fleetPrefix) + ":{t1}:running"
	var res replicaResult
	var mu sync.Mutex
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range fleetGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= total {
				d, err := lim.Check(ctx, req)
				if err != nil || !d.Allowed {
					mu.Lock()
					if err != nil {
						res.Errors++
					} else {
						res.Denied++
					}
					mu.Unlock()
					time.Sleep(time.Duration(5+rand.IntN(15)) * time.Millisecond)
					continue
				}
				running, err := client.Incr(ctx, counter).Result()
				client.Expire(ctx, counter, 10*time.Minute) // as every key a test leaves
				time.Sleep(time.Duration(20+rand.IntN(61)) * time.Millisecond)
				client.Decr(ctx, counter)
				d.Slot.Release()
				mu.Lock()
				res.Admitted++
				if err == nil {
					res.Samples = append(res.Samples, running)
					res.Peak = max(res.Peak, running)
				} else {
					res.Errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Requests = res.Admitted + res.Denied + res.Errors
	_ = lim.Close()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// fleetEnv is the replicas' environment on backend b: a key prefix, and the
// standalone Redis or the shared 3-master Cluster.
func fleetEnv(t *testing.T, b backend) map[string]string {
	env := map[string]string{fleetPrefix: redistest.Prefix(t)}
	if b.name == "cluster" {
		env[fleetCluster] = strings.Join(redistest.SharedCluster(t).Options().Addrs, ",")
	} else {
		env[fleetRedis] = redistest.URL(t)
	}
	return env
}

func replicaCmd(ctx context.Context, env map[string]string, role string, more ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fleetRole+"="+role)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, more...)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestConcurrencyFleet: 4 replica processes × 64 goroutines, one tenant
// with N = 8, handlers of 20-80 ms. The handlers' own fleet-wide count of
// how many run at once never exceeds N, and reaches it.
func TestConcurrencyFleet(t *testing.T) {
	total := int64(fleetDefaultTotal)
	if s := os.Getenv(fleetRequests); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < fleetReplicas {
			t.Fatalf("%s=%q: want a number of requests >= %d", fleetRequests, s, fleetReplicas)
		}
		total = n
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			env := fleetEnv(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
			defer cancel()
			start := time.Now()
			outs := make([][]byte, fleetReplicas)
			errs := make([]error, fleetReplicas)
			var wg sync.WaitGroup
			for i := range fleetReplicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := replicaCmd(ctx, env, "replica", fleetRequests+"="+strconv.FormatInt(total/fleetReplicas, 10))
					outs[i], errs[i] = cmd.Output()
				}()
			}
			wg.Wait()
			took := time.Since(start)
			var all replicaResult
			for i := range fleetReplicas {
				if errs[i] != nil {
					t.Fatalf("replica %d: %v", i, errs[i])
				}
				lines := strings.Split(strings.TrimSpace(string(outs[i])), "\n")
				var r replicaResult
				if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
					t.Fatalf("replica %d: %v in %q", i, err, outs[i])
				}
				all.Requests += r.Requests
				all.Admitted += r.Admitted
				all.Denied += r.Denied
				all.Errors += r.Errors
				all.Peak = max(all.Peak, r.Peak)
				all.Samples = append(all.Samples, r.Samples...)
			}
			slices.Sort(all.Samples)
			median := int64(0)
			if len(all.Samples) > 0 {
				median = all.Samples[len(all.Samples)/2]
			}
			t.Logf("%d requests in %v: %d admitted, %d denied, %d errors; peak in flight %d (N = %d), median in flight at a handler's start %d",
				all.Requests, took.Round(time.Millisecond), all.Admitted, all.Denied, all.Errors, all.Peak, fleetN, median)
			if all.Errors > 0 {
				t.Errorf("%d requests failed", all.Errors)
			}
			if all.Peak > fleetN {
				t.Errorf("peak in flight %d: more than N = %d", all.Peak, fleetN)
			}
			if all.Peak < fleetN {
				t.Errorf("peak in flight %d: the limit N = %d was never used", all.Peak, fleetN)
			}
		})
	}
}

// TestConcurrencyKilledReplica: a replica holding every slot is killed
// (SIGKILL: no release, no renewal); its slots return within the lease
// time, and not at once (nothing but expiry freed them),
// while no other request is admitted beyond N.
func TestConcurrencyKilledReplica(t *testing.T) {
	const lease = 2 * time.Second
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			env := fleetEnv(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := replicaCmd(ctx, env, "holder", fleetLease+"="+lease.String())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			held := make(chan bool, 1)
			go func() {
				line, _ := bufio.NewReader(out).ReadString('\n')
				held <- line == "held\n"
			}()
			select {
			case ok := <-held:
				if !ok {
					t.Fatal("the holder did not take its slots")
				}
			case <-ctx.Done():
				t.Fatal("the holder did not take its slots within a minute")
			}
			// hold them past a renewal, then kill
			time.Sleep(lease / 2)
			get := func(k string) string { return env[k] }
			client := fleetClient(get)
			defer client.Close()
			l := newLimiter(t, client, staticResolver(quota.Bucket{Name: "reports", Quota: fleetQuota}),
				core.WithPrefix(get(fleetPrefix)), core.WithTimeout(lease/4), core.WithConcurrencySlots(lease, 0))
			req := core.Request{Tenant: quota.Tenant{ID: "t1"}, Class: "reports", Cost: 1}
			if d, err := l.Check(ctx, req); err != nil || d.Reason != core.ReasonConcurrencyLimit {
				t.Fatalf("while the holder runs: %v, %v; want a concurrency denial", d.Reason, err)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			_ = cmd.Wait()
			var first time.Duration
			var slots []*core.Slot
			for len(slots) < fleetN {
				if time.Since(killed) > lease+10*(lease/4) {
					t.Fatalf("%d of %d slots back %v after the kill: the lease is %v", len(slots), fleetN, time.Since(killed), lease)
				}
				d, err := l.Check(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					if first == 0 {
						first = time.Since(killed)
					}
					slots = append(slots, d.Slot)
					if d.Buckets[0].InFlight > fleetN {
						t.Fatalf("%d in flight", d.Buckets[0].InFlight)
					}
					continue
				}
				time.Sleep(10 * time.Millisecond)
			}
			all := time.Since(killed)
			if d, _ := l.Check(ctx, req); d.Allowed {
				t.Fatal("an N+1th request admitted")
			}
			for _, s := range slots {
				s.Release()
			}
			t.Logf("lease %v: first slot back %v after the kill, all %d back %v after", lease, first.Round(time.Millisecond), fleetN, all.Round(time.Millisecond))
			// killed half a lease after it held them: no deadline is sooner
			// than that, renewed or not
			if first < lease/4 {
				t.Errorf("a slot back %v after the kill, before its lease could run out (%v): something other than expiry freed it", first, lease)
			}
		})
	}
}
