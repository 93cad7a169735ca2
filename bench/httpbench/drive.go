package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/bench/internal/delaylink"
	"github.com/tollgate-go/tollgate/bench/internal/ints"
	"github.com/tollgate-go/tollgate/bench/internal/localredis"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// proc is one service process.
type proc struct {
	config string
	addr   string
	cmd    *exec.Cmd
	out    *strings.Builder
	done   chan struct{}
}

var outMu sync.Mutex // guards every proc's out

type lockedWriter struct{ b *strings.Builder }

func (w lockedWriter) Write(p []byte) (int, error) {
	outMu.Lock()
	defer outMu.Unlock()
	return w.b.Write(p)
}

// profiles numbers the services' CPU profiles (-cpuprofile).
var profiles atomic.Int64

// startService starts this binary with -serve in configuration config and
// waits, at most 10 s, until it answers /healthz.
func startService(config, redisURL, secret string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &proc{config: config, addr: addr, out: &strings.Builder{}, done: make(chan struct{})}
	args := []string{"-serve", "-config", config, "-addr", addr, "-redis", redisURL, "-lease-ttl", flagLeaseTTL.String()}
	if *flagCPUProfile != "" {
		// one file per service started: the accuracy phase runs replicas
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.%s.%d", *flagCPUProfile, config, profiles.Add(1)))
	}
	p.cmd = pinned(*flagServiceCPU, self, args...)
	p.cmd.Env = append(os.Environ(), secretEnv+"="+secret)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p.out}, lockedWriter{p.out}
	p.cmd.WaitDelay = time.Second
	// The service never outlives the driver, however the driver ends.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := client.Get("http://" + addr + pathHealth)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("service %s exited: %s", config, p.output())
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("service %s not ready within 10s: %s", config, p.output())
		}
	}
}

func (p *proc) output() string {
	outMu.Lock()
	defer outMu.Unlock()
	return p.out.String()
}

// stop asks the service to end and kills it after 3 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// served is a service's answer counts, and its limiter's errors.
type served struct{ ok, limited, other, degraded, gone int64 }

func (a served) minus(b served) served {
	return served{a.ok - b.ok, a.limited - b.limited, a.other - b.other, a.degraded - b.degraded, a.gone - b.gone}
}

// stats reads a service's counts.
func stats(addr string) (served, error) {
	var s served
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + pathStats)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	_, err = fmt.Sscan(string(b), &s.ok, &s.limited, &s.other, &s.degraded, &s.gone)
	return s, err
}

// balancer is a round-robin reverse proxy over the replicas, like the one
// in examples/replicas (there in-process, in package main, so not
// importable; a dozen lines of httputil are not worth a shared package).
func balancer(replicas []*proc) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: 10 * time.Second}
	var next atomic.Uint64
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", replicas[next.Add(1)%uint64(len(replicas))].addr
		},
		Transport: transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	}}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() {
		_ = srv.Close()
		transport.CloseIdleConnections()
	}, nil
}

// run is one wrk measurement.
type run struct {
	config, load string
	conns        int
	wrk          wrkResult
	share429     float64 // 429s / answers, counted by the service
	cpuPerReq    float64 // Redis CPU µs per request
	other        int64   // answers neither 200 nor 429
	degraded     int64   // limiter errors (tollgate: decided by its failure policy)
	gone         int64   // requests whose client had gone (wrk ending its run)
	admitted     int64   // 200s, counted by the service
	wall         float64 // s, the driver's clock around wrk: from before it starts to after it ends
}

// overBound reports whether a limited configuration admitted the hot
// tenant more than a bucket could over the run, capacity + refill x wall
// (generous: the bucket was full at most once, before the first run).
func (r run) overBound() bool {
	return r.load == "1" && limits(r.config) && float64(r.admitted) > capacity+refill*r.wall
}

func (r run) name() string {
	return fmt.Sprintf("HTTP/config=%s/tenants=%s/conns=%d", r.config, r.load, r.conns)
}

func drive() error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not on PATH (make bench/http installs the Debian package)")
	}
	cfgs := strings.Split(*flagConfigs, ",")
	for _, c := range cfgs {
		if !slices.Contains(configs, c) && !slices.Contains(extraConfigs, c) {
			return fmt.Errorf("unknown configuration %q, want some of %s", c, strings.Join(append(configs, extraConfigs...), ","))
		}
	}
	conns, err := ints.Parse(*flagConns)
	if err != nil {
		return err
	}
	if *flagLoadCPU != "" || *flagServiceCPU != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return errors.New("-load-cpu and -service-cpu need taskset (Debian's util-linux) on PATH")
		}
	}
	if *flagLoadCPU != "" {
		// this driver is load too (the accuracy phase's clients, the
		// delaying link): it runs beside wrk
		if out, err := exec.Command("taskset", "-a", "-p", "-c", *flagLoadCPU, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset the driver on %s: %w: %s", *flagLoadCPU, err, out)
		}
	}
	ctx := context.Background()
	srv, err := redistest.StartServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	if err := pinRedis(ctx, rc, *flagServiceCPU); err != nil {
		return err
	}
	serviceURL, rtt := srv.URL(), 0.0
	if *flagDelay > 0 {
		link, err := delaylink.Start(srv.Addr(), *flagDelay)
		if err != nil {
			return err
		}
		defer link.Close()
		serviceURL = "redis://" + link.Addr() + "/0"
		if rtt, err = linkRTT(ctx, srv.Addr(), link.Addr()); err != nil {
			return err
		}
	}

	secret := randomHex(16)
	replicas := map[string][]*proc{}
	defer func() {
		for _, ps := range replicas {
			for _, p := range ps {
				p.stop()
			}
		}
	}()
	for _, c := range cfgs {
		for range *flagReplicas {
			p, err := startService(c, serviceURL, secret)
			if err != nil {
				return err
			}
			replicas[c] = append(replicas[c], p)
		}
	}

	dir, err := os.MkdirTemp("", "httpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tokens := make([]string, *flagTenants)
	for i := range tokens {
		if tokens[i], err = mint([]byte(secret), fmt.Sprintf("t%05d", i), 2*time.Hour); err != nil {
			return err
		}
	}
	script, err := wrkScript(dir, tokens)
	if err != nil {
		return err
	}
	hot, err := mint([]byte(secret), "hot", 2*time.Hour)
	if err != nil {
		return err
	}
	loads := []struct{ name, script, auth string }{
		{fmt.Sprintf("%dk", *flagTenants/1000), script, ""},
		{"1", "", "Bearer " + hot},
	}
	if *flagTenants < 1000 {
		loads[0].name = strconv.Itoa(*flagTenants)
	}

	version, _ := rc.Info(ctx, "server").Result()
	v, _ := localredis.Field(version, "redis_version")
	fmt.Printf("goos: %s\ngoarch: %s\npkg: github.com/tollgate-go/tollgate/bench/httpbench\n", runtime.GOOS, runtime.GOARCH)
	fmt.Printf("redis: %s\ncpus: %d\n", v, runtime.NumCPU())
	fmt.Printf("quota: capacity %d, %d/s; ulule: %d per %v\n", capacity, refill, capacity, window)
	if *flagLoadCPU != "" || *flagServiceCPU != "" {
		fmt.Printf("pinned: wrk and this driver on cores %q, the services and Redis on cores %q (taskset -c; empty: not pinned)\n", *flagLoadCPU, *flagServiceCPU)
	}
	loadavg("start")
	if *flagDelay > 0 {
		fmt.Printf("link: %v each way; measured round trip added to a PING, p50: %.0f µs\n", *flagDelay, rtt)
	}

	// warm-up, not reported: every service, connection pool and script
	for _, c := range cfgs {
		if _, err := runWrk(ctx, "http://"+replicas[c][0].addr+pathProfile, conns[0], time.Second, script, ""); err != nil {
			return err
		}
	}

	var runs []run
	var acc []accuracy
	for rep := range *flagCount {
		for _, ld := range loads {
			for _, n := range conns {
				for i := range cfgs {
					// round-robin, starting one further each repetition
					c := cfgs[(i+rep)%len(cfgs)]
					r, err := measure(ctx, rc, replicas[c][0].addr, c, ld.name, n, ld.script, ld.auth)
					if err != nil {
						return fmt.Errorf("%s: %w", c, err)
					}
					fmt.Printf("Benchmark%s %d %.0f ns/op %.0f req/s %.0f p50-µs %.0f p99-µs %.4f 429-share %.2f redis-cpu-µs/req %d socket-errors %d other-status %d limiter-errors %d admitted %d client-gone\n",
						r.name(), r.wrk.Requests, 1e9/r.wrk.RPS, r.wrk.RPS, r.wrk.P50, r.wrk.P99, r.share429, r.cpuPerReq, r.wrk.SocketErrors, r.other, r.degraded, r.admitted, r.gone)
					runs = append(runs, r)
				}
			}
		}
		a, err := accuracyRound(ctx, cfgs, replicas, secret, rep)
		if err != nil {
			return err
		}
		acc = append(acc, a...)
	}
	loadavg("end")
	md := summary(cfgs, loads[0].name, conns, runs, acc, rtt)
	fmt.Print(md)
	if *flagSVG != "" {
		if err := pictures(*flagSVG, cfgs, loads[0].name, conns, runs, acc, rtt); err != nil {
			return err
		}
	}
	if *flagOut != "" {
		return os.WriteFile(*flagOut, []byte(md), 0o644)
	}
	return nil
}

// linkRTT is what the link adds to a round trip: the median of 500
// sequential PINGs through it less the median of 500 direct ones, in µs.
func linkRTT(ctx context.Context, direct, link string) (float64, error) {
	p50 := func(addr string) (float64, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer c.Close()
		var ds []float64
		for range 500 {
			t0 := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return 0, err
			}
			ds = append(ds, float64(time.Since(t0).Microseconds()))
		}
		return median(ds), nil
	}
	d, err := p50(direct)
	if err != nil {
		return 0, err
	}
	l, err := p50(link)
	if err != nil {
		return 0, err
	}
	return l - d, nil
}

// measure runs wrk once against one service and reads the service's
// counts and Redis CPU around it.
func measure(ctx context.Context, rc *redis.Client, addr, config, load string, conns int, script, auth string) (run, error) {
	s0, err := stats(addr)
	if err != nil {
		return run{}, err
	}
	cpu0, err := localredis.CPU(ctx, rc)
	if err != nil {
		return run{}, err
	}
	start := time.Now()
	w, err := runWrk(ctx, "http://"+addr+pathProfile, conns, *flagDuration, script, auth)
	if err != nil {
		return run{}, err
	}
	wall := time.Since(start).Seconds()
	cpu1, err := localredis.CPU(ctx, rc)
	if err != nil {
		return run{}, err
	}
	s1, err := stats(addr)
	if err != nil {
		return run{}, err
	}
	d := s1.minus(s0)
	r := run{config: config, load: load, conns: conns, wrk: w, other: d.other, degraded: d.degraded, gone: d.gone, admitted: d.ok, wall: wall}
	if total := d.ok + d.limited + d.other; total > 0 {
		r.share429 = float64(d.limited) / float64(total)
	}
	if w.Requests > 0 {
		r.cpuPerReq = (cpu1 - cpu0) * 1e6 / float64(w.Requests)
	}
	return r, nil
}

func loadavg(when string) {
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("loadavg-%s: %s", when, la)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pinned is the command name args, run on cpus (taskset -c) when cpus is
// set. taskset execs the command: the process is the command's own.
func pinned(cpus, name string, args ...string) *exec.Cmd {
	if cpus == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
}

// pinRedis moves every thread of the Redis server behind rc onto cpus
// (none when cpus is empty); its process ID is the server's own INFO.
func pinRedis(ctx context.Context, rc *redis.Client, cpus string) error {
	if cpus == "" {
		return nil
	}
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	pid, ok := localredis.Field(info, "process_id")
	if !ok {
		return errors.New("redis INFO has no process_id")
	}
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, pid).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset redis %s on %s: %w: %s", pid, cpus, err, out)
	}
	return nil
}
