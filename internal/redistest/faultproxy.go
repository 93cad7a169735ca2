package redistest

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Fault is what a FaultProxy does to the traffic passing through it.
type Fault int

// Faults.
const (
	// Pass forwards everything unchanged.
	Pass Fault = iota
	// Latency delays every reply by the proxy's latency (SetLatency).
	Latency
	// DropReply forwards every command to Redis, then discards its reply and
	// resets the client's connection: the command ran, the client never
	// learns its result. A connection's handshake (HELLO, AUTH, CLIENT,
	// SELECT) is spared, so that clients can still connect.
	DropReply
	// Reset resets every open connection (TCP RST) and every new one at once.
	Reset
	// Stall forwards commands but holds their replies: the client's reads
	// stall until the fault changes (or the proxy closes), then the replies
	// flow again.
	Stall
	// Blackhole accepts connections and reads them, but forwards nothing and
	// answers nothing.
	Blackhole
)

var faultNames = [...]string{"pass", "latency", "drop-reply", "reset", "stall", "blackhole"}

func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// FaultProxy is a TCP proxy placed between a client and a real Redis that
// injects faults into the real connections: added latency, a reply dropped
// after its command ran, connection resets, stalled reads, a blackhole. The
// fault can be switched at any time. It runs one goroutine to accept and two
// per connection, all ended by Close (or when the test ends), so it leaves no
// goroutine behind.
type FaultProxy struct {
	upstream string
	ln       net.Listener
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	fault   Fault
	latency time.Duration
	changed chan struct{} // closed and replaced when the fault changes
	conns   map[*proxyConn]struct{}
	closed  bool
}

type proxyConn struct {
	client, server net.Conn
	// dropNext: a command was forwarded under DropReply; its reply is
	// dropped and the connection reset
	mu       sync.Mutex
	dropNext bool
	once     sync.Once
}

// NewFaultProxy starts a proxy to upstream (host:port) on a free local
// port, closed when t ends.
func NewFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	p, err := StartFaultProxy(upstream)
	if err != nil {
		t.Fatalf("redistest: fault proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartFaultProxy starts a proxy to upstream (host:port) on a free local
// port. Close it when done.
func StartFaultProxy(upstream string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{upstream: upstream, ln: ln, done: make(chan struct{}), changed: make(chan struct{}),
		conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port, for the client.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// URL returns redis://host:port/0 of the proxy.
func (p *FaultProxy) URL() string { return "redis://" + p.Addr() + "/0" }

// Set switches the fault, at once, for open and new connections.
func (p *FaultProxy) Set(f Fault) {
	p.mu.Lock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	var reset []*proxyConn
	if f == Reset {
		for c := range p.conns {
			reset = append(reset, c)
		}
	}
	p.mu.Unlock()
	for _, c := range reset {
		c.reset()
	}
}

// SetLatency sets the delay the Latency fault adds to every reply.
func (p *FaultProxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Fault returns the current fault.
func (p *FaultProxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

func (p *FaultProxy) state() (Fault, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.latency, p.changed
}

// Close stops the proxy, closes every connection and waits for its
// goroutines to end.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if f, _, _ := p.state(); f == Reset {
			resetConn(client)
			continue
		}
		server, err := net.DialTimeout("tcp", p.upstream, time.Second)
		if err != nil {
			resetConn(client)
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.commands(c)
		go p.replies(c)
	}
}

func (p *FaultProxy) forget(c *proxyConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// commands pumps client to server.
func (p *FaultProxy) commands(c *proxyConn) {
	defer p.wg.Done()
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			switch f, _, _ := p.state(); f {
			case Blackhole:
				continue
			case DropReply:
				if !handshake(buf[:n]) {
					c.mu.Lock()
					c.dropNext = true
					c.mu.Unlock()
				}
			}
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies pumps server to client, applying the fault.
func (p *FaultProxy) replies(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if !p.deliver(c, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver forwards one chunk of replies under the current fault; false
// ends the connection.
func (p *FaultProxy) deliver(c *proxyConn, b []byte) bool {
	for {
		f, latency, changed := p.state()
		c.mu.Lock()
		drop := c.dropNext
		c.mu.Unlock()
		switch {
		case drop:
			// the command ran; its reply is lost with the connection. Let
			// Redis finish what it read (the rest of a pipeline) first.
			resetConn(c.client)
			p.drain(c.server)
			return false
		case f == Reset:
			c.reset()
			return false
		case f == Blackhole, f == Stall:
			select {
			case <-changed:
				continue
			case <-p.done:
				return false
			}
		case f == Latency && latency > 0:
			t := time.NewTimer(latency)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
				return false
			}
		}
		_, err := c.client.Write(b)
		return err == nil
	}
}

// drain reads and discards what the server still sends, until it is quiet
// for a moment.
func (p *FaultProxy) drain(server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		_ = server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := server.Read(buf); err != nil {
			return
		}
	}
}

// handshake reports whether a chunk of commands is a connection's set-up.
func handshake(b []byte) bool {
	// RESP: *<n>\r\n$<len>\r\n<name>\r\n...
	i := bytes.Index(b, []byte("\r\n$"))
	if i < 0 {
		return false
	}
	rest := b[i+3:]
	j := bytes.Index(rest, []byte("\r\n"))
	if j < 0 {
		return false
	}
	name := bytes.ToUpper(rest[j+2 : min(len(rest), j+2+6)])
	for _, h := range []string{"HELLO", "AUTH", "CLIENT", "SELECT"} {
		if bytes.HasPrefix(name, []byte(h)) {
			return true
		}
	}
	return false
}

func (c *proxyConn) reset() {
	c.once.Do(func() {
		resetConn(c.client)
		_ = c.server.Close()
	})
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// resetConn closes a connection with a TCP RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
