// Command scriptcost counts the machine instructions tollgate's token-bucket
// script costs Redis per call, beside a floor script that only does what any
// bucket on the server's clock must (GET the key, TIME, SET a value back
// with PX), so that the ratio between the two does not move with the
// machine's load the way Redis CPU seconds do.
//
// For each script and workload it starts a private redis-server under
// valgrind's callgrind, collecting only inside EVALSHA:
//
//	valgrind --tool=callgrind --toggle-collect=evalShaCommand --collect-atstart=no redis-server ...
//
// loads the script, writes every key once (the warm-up), zeroes the
// counters (callgrind_control -z), makes -calls sequential EVALSHA calls
// from one connection, round robin over the keys, with loadbench's quota
// (capacity 1000, 100 tokens/s, cost 1, the server's clock; a TTL of an
// hour so that no key expires during the count), dumps the counters
// (callgrind_control -d) and divides the instructions collected by the
// calls. Workloads: 10,000 keys,
// each called again only after the other 9,999 (every call an admission of
// a bucket refilled to full: the same digits every time, so the count
// repeats to the instruction), and one hot key (mostly denials; the
// balance's digits vary, so the count varies a little).
//
//	cd bench && go run ./scriptcost            # what make bench/script runs
//	cd bench && go run ./scriptcost -script x.lua   # an ablation in place of tollgate's
//
// It needs valgrind (Debian's) and redis-server on PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/bench/internal/svgplot"
	"github.com/tollgate-go/tollgate/core/lua"
)

// floorScript is loadbench's floor: the least any token bucket kept on the
// server's clock must do per call. It takes tollgate's arguments (ARGV[5]
// is the TTL).
const floorScript = `local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
redis.call('SET', KEYS[1], t[1] .. ' ' .. t[2], 'PX', ARGV[5])
return 1`

// the quota of every call: loadbench's
const (
	capacity = 1000
	rate     = 100
)

var (
	flagCalls  = flag.Int("calls", 20000, "counted calls per script and workload")
	flagRounds = flag.Int("rounds", 2, "repetitions of every count, interleaved (the count should repeat)")
	flagScript = flag.String("script", "", "a Lua file to count in place of tollgate's script (ablations)")
	flagOut    = flag.String("markdown", "", "also write the Markdown summary to this file")
	flagSVG    = flag.String("svg", "", "also draw the counts as bars into this SVG file")
	flagKeep   = flag.String("keep", "", "copy every callgrind dump into this directory (for callgrind_annotate)")
)

// quiet: go-redis logs every refused dial while valgrind starts the server
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	flag.Parse()
	redis.SetLogger(quiet{})
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

type workload struct {
	name string
	keys int
}

var workloads = []workload{{"10k", 10000}, {"hot", 1}}

func run() error {
	for _, bin := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is needed on PATH (Debian: apt-get install valgrind redis-server): %w", bin, err)
		}
	}
	if *flagCalls < 1 || *flagRounds < 1 {
		return errors.New("-calls and -rounds must be at least 1")
	}
	script := lua.TokenBucket()
	name := "tollgate"
	if *flagScript != "" {
		b, err := os.ReadFile(*flagScript)
		if err != nil {
			return err
		}
		script, name = string(b), filepath.Base(*flagScript)
	}
	scripts := []struct{ name, src string }{{name, script}, {"floor", floorScript}}
	// per workload, per script: every round's count
	counts := map[string]map[string][]float64{}
	for round := 0; round < *flagRounds; round++ {
		for _, w := range workloads {
			for _, s := range scripts {
				n, err := count(s.src, s.name, w.keys, *flagCalls)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", s.name, w.name, err)
				}
				if counts[w.name] == nil {
					counts[w.name] = map[string][]float64{}
				}
				counts[w.name][s.name] = append(counts[w.name][s.name], n)
				fmt.Printf("BenchmarkScript/tenants=%s/script=%s 1 %.0f instructions/call\n", w.name, s.name, n)
			}
		}
	}
	var md strings.Builder
	fmt.Fprintf(&md, "\n| workload | %s, instructions/call | floor | ratio |\n|---|---|---|---|\n", name)
	for _, w := range workloads {
		a, f := median(counts[w.name][name]), median(counts[w.name]["floor"])
		fmt.Fprintf(&md, "| %s | %.0f | %.0f | **%.3fx** |\n", w.name, a, f, a/f)
	}
	fmt.Print(md.String())
	if *flagSVG != "" {
		chart := svgplot.Bars{
			Title:  fmt.Sprintf("Instructions per call inside EVALSHA (callgrind, medians of %d counts of %d calls)", *flagRounds, *flagCalls),
			YLabel: "instructions per call", Series: []string{name, "floor (GET, TIME, SET PX)"}, Format: "%.0f",
		}
		for _, w := range workloads {
			a, f := median(counts[w.name][name]), median(counts[w.name]["floor"])
			label := "10,000 keys (admissions)"
			if w.keys == 1 {
				label = "one hot key (mostly denials)"
			}
			chart.Groups = append(chart.Groups, fmt.Sprintf("%s: %.2fx", label, a/f))
			chart.Values = append(chart.Values, []float64{a, f})
		}
		if err := svgplot.Write(*flagSVG, chart.SVG()); err != nil {
			return err
		}
	}
	if *flagOut != "" {
		return os.WriteFile(*flagOut, []byte(md.String()), 0o644)
	}
	return nil
}

// median is the middle count (the lower of the two middle ones).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// count returns the instructions callgrind collects inside EVALSHA per call
// of src, on a fresh server, over keys keys.
func count(src, keep string, keys, calls int) (float64, error) {
	dir, err := os.MkdirTemp("", "tollgate-scriptcost-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand", "--collect-atstart=no",
		"--callgrind-out-file="+out,
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), PoolSize: 1, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	defer c.Close()
	if err := waitReady(ctx, c, done, time.Minute); err != nil {
		return 0, err
	}
	sha, err := c.ScriptLoad(ctx, src).Result()
	if err != nil {
		return 0, err
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = "sc:{t" + strconv.Itoa(i) + "}:default"
	}
	// a TTL of an hour: a key that expired during a slow pass would be
	// deleted inside the next call and counted (loadbench's 11 s TTL is
	// shorter than a pass under valgrind on a loaded machine); no decision
	// depends on it
	args := []any{"", "1", strconv.Itoa(capacity), strconv.Itoa(rate), "3600000"}
	call := func(i int) error {
		err := c.EvalSha(ctx, sha, names[i%keys:i%keys+1], args...).Err()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	}
	// warm-up: every key written, the allocator and the Lua heap settled
	for i := 0; i < max(keys, 1000); i++ {
		if err := call(i); err != nil {
			return 0, err
		}
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if b, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control -z: %v: %s", err, b)
	}
	for i := 0; i < calls; i++ {
		if err := call(i); err != nil {
			return 0, err
		}
	}
	if b, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control -d: %v: %s", err, b)
	}
	dumps, _ := filepath.Glob(out + ".*")
	if len(dumps) != 1 {
		return 0, fmt.Errorf("callgrind wrote %d dumps, want 1: %v", len(dumps), dumps)
	}
	if *flagKeep != "" {
		b, err := os.ReadFile(dumps[0])
		if err == nil {
			err = os.WriteFile(filepath.Join(*flagKeep, fmt.Sprintf("callgrind.%s.%d.%d", keep, keys, time.Now().UnixNano())), b, 0o644)
		}
		if err != nil {
			return 0, err
		}
	}
	total, err := totals(dumps[0])
	if err != nil {
		return 0, err
	}
	return total / float64(calls), nil
}

// totals reads the instructions (the first event, Ir) of a callgrind dump.
func totals(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(line, p); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					return strconv.ParseFloat(f[0], 64)
				}
			}
		}
	}
	return 0, fmt.Errorf("%s: no summary line", path)
}

func waitReady(ctx context.Context, c *redis.Client, done <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("redis-server under valgrind exited during start-up")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server under valgrind not ready within %v: %w", within, err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
