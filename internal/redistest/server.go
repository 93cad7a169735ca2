package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server process that a test may stop, kill,
// pause (SIGSTOP) and restart on the same port.
type Server struct {
	mu    sync.Mutex
	port  int
	dir   string
	conf  string // a configuration file, the first argument; "" for none
	extra []string
	cmd   *exec.Cmd
	done  chan struct{}
}

// NewServer starts a private redis-server with extra configuration
// arguments (e.g. "--maxmemory", "2mb"), stopped when t ends.
func NewServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	needBinary(t, "a private Redis server")
	s, err := startServer(extra)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.shutdown)
	return s
}

// StartServer starts a private redis-server like [NewServer], for code
// outside a test (a load driver, a demo tool) that has no testing.TB: the
// caller stops it with [Server.Close]. It is the one place the tollgate
// tree starts redis-server, so every tool gets the same start-up: a free
// port, a temporary directory, no persistence, and a server that dies with
// its parent.
func StartServer(extra ...string) (*Server, error) {
	return startServer(extra)
}

func startServer(extra []string) (*Server, error) {
	return startWith(func(port int, dir string) (string, error) { return "", nil }, extra)
}

// startWith starts a server on a free port in a new temporary directory;
// conf writes its configuration file there, or returns "" for none.
func startWith(conf func(port int, dir string) (string, error), extra []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tollgate-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{port: port, dir: dir, extra: extra}
	if s.conf, err = conf(port, dir); err == nil {
		err = s.start(bin)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// NewSentinel starts a private Redis Sentinel that monitors the master at
// masterAddr (host:port) under name, stopped when t ends. Its address is
// [Server.Addr]; clients connect with redis.NewFailoverClient.
func NewSentinel(t testing.TB, name, masterAddr string) *Server {
	t.Helper()
	needBinary(t, "a Sentinel")
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		t.Fatalf("redistest: sentinel: master address %q: %v", masterAddr, err)
	}
	s, err := startWith(func(p int, dir string) (string, error) {
		// Sentinel needs a file of its own: it rewrites it with what it learns
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 2000\n",
			p, dir, name, host, port, name)
		return conf, os.WriteFile(conf, []byte(body), 0o600)
	}, []string{"--sentinel"})
	if err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	t.Cleanup(s.shutdown)
	return s
}

// Addr returns host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// URL returns redis://host:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a new client of the server, closed when t ends.
func (s *Server) Client(t testing.TB, opt ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr(), MaxRetries: -1}
	for _, f := range opt {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) args() []string {
	var a []string
	if s.conf != "" {
		a = append(a, s.conf)
	}
	a = append(a,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
	)
	return append(a, s.extra...)
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args()...)
	// the server dies with the test binary, however it ends
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return waitReady(s.Addr(), done, 10*time.Second)
}

func waitReady(addr string, done <-chan struct{}, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on %s exited during start-up", addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready within %v: %w", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), losing its data and script cache.
func (s *Server) Kill() { s.signalAndWait(syscall.SIGKILL) }

// Stop stops the server (SIGTERM) and waits for it to exit.
func (s *Server) Stop() { s.signalAndWait(syscall.SIGTERM) }

func (s *Server) signalAndWait(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot exit
	_ = cmd.Process.Signal(sig)
	<-done
}

// Restart starts a stopped or killed server again on the same port.
func (s *Server) Restart() error {
	s.Stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return s.start(bin)
}

// Pause freezes the server (SIGSTOP): connections stay open, nothing answers.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Favor gives the server's event loop a CPU priority above the test's
// own processes (nice -10; it must run as root, else an error): for a test
// whose premise is a healthy Redis while the processes under test and the
// load generator starve the shared cores, so that the store answers as a
// store on a host of its own would. A restarted server starts unfavoured.
func (s *Server) Favor() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server is not running")
	}
	return syscall.Setpriority(syscall.PRIO_PROCESS, s.cmd.Process.Pid, -10)
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Close kills the server and removes its directory: the end of a server
// from [StartServer] (a test's servers are closed when it ends).
func (s *Server) Close() { s.shutdown() }

func (s *Server) shutdown() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Dir returns the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }
