package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// The flood mode (-flood N): one tenant on N keep-alive connections, each
// sending its next request as soon as it read the answer to the last,
// while a quiet tenant sends -victim-rate requests a second (well within
// its bucket: every answer should be an admission), for -flood-for. The
// service (configuration tollgate, defaults) and its Redis run on
// -service-cpu, this driver (the load) on -load-cpu. It reports what the
// quiet tenant got, alone and beside the flood: the share of its requests
// admitted is the figure (a shed check is a 503, a timeout an error).
var (
	flagFlood      = flag.Int("flood", 0, "run the flood mode: one tenant on this many connections beside a quiet tenant (0: off)")
	flagFloodFor   = flag.Duration("flood-for", 10*time.Second, "with -flood: how long the flood runs")
	flagVictimRate = flag.Int("victim-rate", 10, "with -flood: the quiet tenant's requests a second")
	flagFloodLog   = flag.Bool("flood-log", false, "with -flood: print the service's log (its degraded and shed checks, at most one a second) at the end")
)

// answers counts one tenant's answers.
type answers struct{ admitted, denied, shed, other, errs atomic.Int64 }

func (a *answers) count(status int) {
	switch status {
	case http.StatusOK:
		a.admitted.Add(1)
	case http.StatusTooManyRequests:
		a.denied.Add(1)
	case http.StatusServiceUnavailable:
		a.shed.Add(1)
	default:
		a.other.Add(1)
	}
}

func (a *answers) String() string {
	return fmt.Sprintf("admitted %d, denied %d, shed (503) %d, other %d, errors %d",
		a.admitted.Load(), a.denied.Load(), a.shed.Load(), a.other.Load(), a.errs.Load())
}

func floodDrive() error {
	if *flagLoadCPU != "" || *flagServiceCPU != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return errors.New("-load-cpu and -service-cpu need taskset (Debian's util-linux) on PATH")
		}
	}
	if *flagLoadCPU != "" {
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
	secret := randomHex(16)
	p, err := startService("tollgate", srv.URL(), secret)
	if err != nil {
		return err
	}
	defer p.stop()
	token := func(tenant string) (string, error) {
		t, err := mint([]byte(secret), tenant, time.Hour)
		return "Bearer " + t, err
	}
	floodAuth, err := token("flood")
	if err != nil {
		return err
	}
	aloneAuth, err := token("quiet-alone")
	if err != nil {
		return err
	}
	besideAuth, err := token("quiet-beside")
	if err != nil {
		return err
	}
	url := "http://" + p.addr + pathProfile
	alone := &answers{}
	victim(alone, url, aloneAuth, *flagFloodFor)
	fmt.Printf("quiet tenant alone: %d sent: %v\n", int(flagFloodFor.Seconds())*(*flagVictimRate), alone)

	before, err := stats(p.addr)
	if err != nil {
		return err
	}
	flooded, beside := &answers{}, &answers{}
	stop := make(chan struct{})
	var dialed atomic.Int64
	var wg sync.WaitGroup
	raw := []byte("GET " + pathProfile + " HTTP/1.1\r\nHost: " + p.addr + "\r\nAuthorization: " + floodAuth + "\r\n\r\n")
	for range *flagFlood {
		wg.Go(func() { floodConn(flooded, p.addr, raw, stop, &dialed) })
	}
	// the flood's connections up before the quiet tenant starts
	for deadline := time.Now().Add(30 * time.Second); dialed.Load() < int64(*flagFlood) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	la := loadavgNow()
	victim(beside, url, besideAuth, *flagFloodFor)
	close(stop)
	wg.Wait()
	after, err := stats(p.addr)
	if err != nil {
		return err
	}
	d := after.minus(before)
	sent := int64(flagFloodFor.Seconds()) * int64(*flagVictimRate)
	fmt.Printf("flood: %d connections (%d dialed): %v\n", *flagFlood, dialed.Load(), flooded)
	fmt.Printf("quiet tenant beside the flood: %d sent: %v\n", sent, beside)
	// a limiter error answered 200 is a check the failure policy passed
	// (fail open, the default): unchecked
	fmt.Printf("service during the flood: ok %d (of which unchecked, failed open: %d), 429 %d, other %d, limiter errors %d, client gone %d; load average before: %s\n",
		d.ok, d.degraded-d.other, d.limited, d.other, d.degraded, d.gone, la)
	fmt.Printf("quiet tenant's share admitted beside the flood: %.2f (alone: %.2f)\n",
		float64(beside.admitted.Load())/float64(sent), float64(alone.admitted.Load())/float64(sent))
	p.stop()
	if *flagFloodLog {
		fmt.Printf("the service's log:\n%s\n", p.output())
	}
	return nil
}

// victim sends rate requests a second for d, each on its own goroutine
// and connection pool slot, and waits for every answer (at most 20 s each).
func victim(a *answers, url, auth string, d time.Duration) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range int(d.Seconds()) * (*flagVictimRate) {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(*flagVictimRate))))
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Authorization", auth)
			resp, err := c.Do(req)
			if err != nil {
				a.errs.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			a.count(resp.StatusCode)
		})
	}
	wg.Wait()
}

// floodConn sends raw on one connection and reads its answer, again and
// again, until stop is closed.
func floodConn(a *answers, addr string, raw []byte, stop <-chan struct{}, dialed *atomic.Int64) {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if conn == nil {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				a.errs.Add(1)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			dialed.Add(1)
			conn, br = c, bufio.NewReader(c)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := conn.Write(raw); err != nil {
			a.errs.Add(1)
			_ = conn.Close()
			conn = nil
			continue
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			a.errs.Add(1)
			_ = conn.Close()
			conn = nil
			continue
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		a.count(resp.StatusCode)
		if err != nil || resp.Close {
			_ = conn.Close()
			conn = nil
		}
	}
}

// loadavgNow is the machine's load average (/proc/loadavg's first three).
func loadavgNow() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	var a, b1, c string
	_, _ = fmt.Sscan(string(b), &a, &b1, &c)
	return a + " " + b1 + " " + c
}
