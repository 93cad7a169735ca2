package test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/internal/testkit"
)

// TestRLQSAgainstShouldRateLimit (make bench/rlqs) offers the same load to
// one bucket (capacity 1,000, 100/s) through ShouldRateLimit (a call per
// request) and through RLQS (eight client processes over two quota
// servers), with even and skewed demand, on a private Redis, and prints
// per mode: each client's admissions against its max-min fair share,
// admissions against capacity + rate x elapsed, and script calls and
// Redis CPU per 1,000 requests. A benchmark: it runs only with
// TOLLGATE_BENCH_RLQS=1, and fails only when the bound is broken.
func TestRLQSAgainstShouldRateLimit(t *testing.T) {
	if os.Getenv("TOLLGATE_BENCH_RLQS") != "1" {
		t.Skip("a benchmark: TOLLGATE_BENCH_RLQS=1 (make bench/rlqs) runs it")
	}
	for _, load := range []struct {
		name    string
		demands []float64
	}{
		{"even", []float64{50, 50, 50, 50, 50, 50, 50, 50}},
		{"skewed", []float64{5, 10, 20, 40, 80, 80, 80, 80}},
	} {
		for _, mode := range []string{"ShouldRateLimit", "RLQS"} {
			t.Run(load.name+"/"+mode, func(t *testing.T) { benchRLQS(t, mode, load.demands) })
		}
	}
}

// redisCPU is the server's CPU seconds (user + sys).
func redisCPU(t *testing.T, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}

// benchCounts is what one client (a gateway) did.
type benchCounts interface {
	counts() (allowed, denied uint64, out float64)
}

type srlGateway struct{ allowed, denied atomic.Uint64 }

func (g *srlGateway) counts() (uint64, uint64, float64) { return g.allowed.Load(), g.denied.Load(), 0 }

type childCounts struct{ *quotaChild }

func (c childCounts) counts() (uint64, uint64, float64) {
	s := c.snapshot()
	return s.Stats.Allowed, s.Stats.Denied, s.Out
}

func benchRLQS(t *testing.T, mode string, demands []float64) {
	srv := redistest.NewServer(t)
	rdb := srv.Client(t)
	lim := testkit.NewLimiter(t, rdb, rlqsTiers(), core.WithBatching(false))
	t.Cleanup(func() { _ = lim.Close() })
	const duration, settle = 12 * time.Second, 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	gws := make([]benchCounts, len(demands))
	var wg sync.WaitGroup
	start := time.Now()
	var children []*quotaChild
	switch mode {
	case "ShouldRateLimit":
		c := serve(t, lim)
		for i, d := range demands {
			g := &srlGateway{}
			gws[i] = g
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Duration(float64(time.Second) / d))
				defer tick.Stop()
				req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}}
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						res, err := c.ShouldRateLimit(ctx, req)
						if err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
							g.allowed.Add(1)
						} else if err == nil {
							g.denied.Add(1)
						}
					}
				}
			}()
		}
	case "RLQS":
		addrs := []string{startQuotaServer(t, lim, rdb).addr, startQuotaServer(t, lim, rdb).addr}
		for i, d := range demands {
			q := startQuotaChild(t, quotaChildSpec{Addrs: []string{addrs[i%2]}, Demand: d, Duration: duration})
			children = append(children, q)
			gws[i] = childCounts{q}
		}
	}
	var over = math.Inf(-1)
	var atStart [][2]uint64
	var calls0, cpu0 float64
	var windowAt time.Time
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-sample.C:
			var admitted, out float64
			for _, g := range gws {
				a, _, o := g.counts()
				admitted, out = admitted+float64(a), out+o
			}
			elapsed := now.Sub(start).Seconds()
			if bound := rlqsCap + rlqsRate*elapsed + out + float64(len(gws)); admitted > bound {
				t.Errorf("at %.2fs: %v admitted, above the bound %.1f", elapsed, admitted, bound)
			}
			over = max(over, admitted-(rlqsCap+rlqsRate*elapsed))
			if windowAt.IsZero() && now.Sub(start) >= settle {
				for _, g := range gws {
					a, d, _ := g.counts()
					atStart = append(atStart, [2]uint64{a, d})
				}
				calls0, cpu0, windowAt = float64(scriptCalls(t, rdb)), redisCPU(t, rdb), now
			}
		}
	}
	calls, cpu, end := float64(scriptCalls(t, rdb))-calls0, redisCPU(t, rdb)-cpu0, time.Now()
	window := end.Sub(windowAt).Seconds()
	offered := make([]float64, len(gws))
	admitted := make([]float64, len(gws))
	var requests float64
	for i, g := range gws {
		a, d, _ := g.counts()
		admitted[i] = float64(a-atStart[i][0]) / window
		offered[i] = float64(a+d-atStart[i][0]-atStart[i][1]) / window
		requests += offered[i] * window
	}
	wg.Wait()
	if children != nil {
		waitQuotaChildren(t, children, 30*time.Second)
	}
	shares := fairShares(rlqsRate, offered)
	var worst float64
	var rows []string
	for i := range gws {
		worst = max(worst, math.Abs(admitted[i]-shares[i])/shares[i])
		rows = append(rows, fmt.Sprintf("%.1f/%.1f", admitted[i], shares[i]))
	}
	t.Logf("| %s | %s | %s | %.0f%% | %.1f | %.2f | %.1f ms |", mode, fmtDemands(offered), strings.Join(rows, ", "), 100*worst, over, calls/requests*1000, cpu/requests*1000*1000)
}

func fmtDemands(ds []float64) string {
	var s []string
	for _, d := range ds {
		s = append(s, strconv.FormatFloat(d, 'f', 0, 64))
	}
	return strings.Join(s, ", ")
}
