// Package localredis starts a private redis-server for the load drivers in
// this module and reads the server's own figures (INFO) that they report.
package localredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server (from PATH) on a free loopback port, in a
// temporary directory, without persistence.
type Server struct {
	cmd  *exec.Cmd
	port int
	dir  string
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is redis://host:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Start starts a server and waits, at most 10 s, until it answers PING.
// The server dies with the calling process (Pdeathsig) should Stop never
// run.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "loadbench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", dir+"/redis.log")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server (set -redis or REDIS_URL to use another): %w", err)
	}
	s := &Server{cmd: cmd, port: port, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server not ready within 10s")
		}
	}
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// CPU is the server's used_cpu_sys + used_cpu_user, in seconds.
func CPU(ctx context.Context, c redis.UniversalClient) (float64, error) {
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, ok := Field(s, f)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		total += x
	}
	return total, nil
}

// Field returns the value of name in the text of an INFO reply.
func Field(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
