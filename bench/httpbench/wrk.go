package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// wrkResult is what the driver reads from `wrk --latency`.
type wrkResult struct {
	Requests     int64   // completed requests
	Seconds      float64 // the run's length as wrk measured it
	RPS          float64 // Requests/sec
	P50, P99     float64 // latency, µs
	Non2xx       int64   // "Non-2xx or 3xx responses"
	SocketErrors int64   // connect + read + write + timeout
}

// parseWrk reads wrk's --latency report. It fails when the report lacks
// the request count, the rate or the 50% and 99% latencies, so that a
// change in wrk's format is an error, not a row of zeros.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var have50, have99, haveReq, haveRPS bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			d, err := wrkDuration(f[1])
			if err != nil {
				return r, err
			}
			if f[0] == "50%" {
				r.P50, have50 = d, true
			} else {
				r.P99, have99 = d, true
			}
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk: request count %q: %w", f[0], err)
			}
			d, err := wrkDuration(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return r, err
			}
			r.Requests, r.Seconds, haveReq = n, d/1e6, true
		case len(f) == 2 && f[0] == "Requests/sec:":
			x, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("wrk: Requests/sec %q: %w", f[1], err)
			}
			r.RPS, haveRPS = x, true
		case len(f) == 5 && strings.Join(f[:4], " ") == "Non-2xx or 3xx responses:":
			n, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk: non-2xx count %q: %w", f[4], err)
			}
			r.Non2xx = n
		case len(f) > 2 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				n, err := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				if err != nil {
					return r, fmt.Errorf("wrk: socket errors %q: %w", sc.Text(), err)
				}
				r.SocketErrors += n
			}
		}
	}
	if !have50 || !have99 || !haveReq || !haveRPS {
		return r, fmt.Errorf("wrk: incomplete report (want the 50%%/99%% latencies, the request count and Requests/sec; run with --latency):\n%s", out)
	}
	return r, nil
}

// wrkDuration converts wrk's 1.23us / 4.56ms / 7.89s / 1.00m to µs.
func wrkDuration(s string) (float64, error) {
	units := []struct {
		suffix string
		us     float64
	}{{"us", 1}, {"ms", 1e3}, {"s", 1e6}, {"m", 60e6}, {"h", 3600e6}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				break
			}
			return x * u.us, nil
		}
	}
	return 0, fmt.Errorf("wrk: duration %q", s)
}

// wrkScript writes the Lua script that rotates tokens, one request each:
// every wrk thread starts at its own offset, so the threads' requests
// spread over all the tenants.
func wrkScript(dir string, tokens []string) (string, error) {
	var b strings.Builder
	b.WriteString("local tokens = {\n")
	for _, t := range tokens {
		fmt.Fprintf(&b, "%q,\n", "Bearer "+t)
	}
	b.WriteString(`}
local threads = 0
function setup(thread)
  thread:set("offset", threads * 7919)
  threads = threads + 1
end
local i = 0
function init(args)
  i = offset or 0
end
function request()
  i = i + 1
  return wrk.format(nil, nil, {["Authorization"] = tokens[i % #tokens + 1]})
end
`)
	p := filepath.Join(dir, "tenants.lua")
	return p, os.WriteFile(p, []byte(b.String()), 0o600)
}

// runWrk runs wrk for d with conns connections on 2 threads, either with
// the token script or with one Authorization header, and parses its
// report. It is killed if it outlives d by 20 s.
func runWrk(ctx context.Context, url string, conns int, d time.Duration, script, authorization string) (wrkResult, error) {
	ctx, cancel := context.WithTimeout(ctx, d+20*time.Second)
	defer cancel()
	args := []string{"-t", "2", "-c", strconv.Itoa(conns), "-d", strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s", "--timeout", "5s", "--latency"}
	if script != "" {
		args = append(args, "-s", script)
	} else {
		args = append(args, "-H", "Authorization: "+authorization)
	}
	name, args := "wrk", append(args, url)
	if *flagLoadCPU != "" {
		name, args = "taskset", append([]string{"-c", *flagLoadCPU, "wrk"}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return parseWrk(string(out))
}
