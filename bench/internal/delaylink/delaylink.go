// Package delaylink is a TCP proxy that delays every byte by a fixed time
// in each direction, as a network link does: a chunk read at time t is
// written at t + delay, and reading goes on meanwhile, so that the delay is
// a propagation delay, not a per-connection pause (the test harness's fault
// proxy, internal/redistest, sleeps before each reply chunk, which
// serializes a connection and delays only replies). The load drivers put
// it between services and Redis to measure what a round trip costs.
package delaylink

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Link is a running proxy.
type Link struct {
	upstream string
	delay    time.Duration
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

// Start listens on a free local port and forwards every connection to
// upstream (host:port), delaying each direction by delay (>= 0).
func Start(upstream string, delay time.Duration) (*Link, error) {
	if delay < 0 {
		return nil, errors.New("delaylink: negative delay")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{upstream: upstream, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the proxy's host:port.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Close stops the proxy and closes every connection through it.
func (l *Link) Close() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	_ = l.ln.Close()
	l.wg.Wait()
}

func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", l.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !l.track(client) || !l.track(server) {
			_ = server.Close()
			continue
		}
		l.wg.Add(1)
		go l.serve(client, server)
	}
}

// serve runs both directions of one connection and closes both ends when
// both are done.
func (l *Link) serve(client, server net.Conn) {
	defer l.wg.Done()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pump(client, server) }()
	go func() { defer wg.Done(); l.pump(server, client) }()
	wg.Wait()
	l.mu.Lock()
	delete(l.conns, client)
	delete(l.conns, server)
	l.mu.Unlock()
	_ = client.Close()
	_ = server.Close()
}

type chunk struct {
	due time.Time
	b   []byte
}

// pump copies src to dst, each chunk delay after it was read. The reader
// hands chunks to a writer over a buffered channel, so that a slow writer
// does not stop the reading (up to 1024 chunks in flight).
func (l *Link) pump(src, dst net.Conn) {
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				for range q { // drain: the reader ends when src is closed
				}
				return
			}
		}
		// src ended: end dst's writing side, so that the peer sees EOF
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(l.delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// sleep waits d in nanosleep, blocking this goroutine's thread: the
// runtime's timers wake sub-millisecond sleeps up to a millisecond late on
// Linux (they wait in epoll, whose timeout is in milliseconds), which would
// turn a 250 µs link into a 1 ms one; nanosleep wakes within the kernel's
// timer slack (50 µs by default).
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
