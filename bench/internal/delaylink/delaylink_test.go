package delaylink

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves one connection at a time, writing back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestDelaysEachDirectionAndKeepsTheBytes(t *testing.T) {
	const delay = 20 * time.Millisecond
	l, err := Start(echo(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	// a round trip takes at least the delay twice (only a lower bound: a
	// loaded machine may take longer)
	for range 3 {
		t0 := time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(t0); rtt < 2*delay {
			t.Fatalf("round trip %v, want at least %v", rtt, 2*delay)
		}
	}
	// many chunks in flight: every byte arrives, in order
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes changed on the way")
	}
}

func TestCloseEndsConnections(t *testing.T) {
	l, err := Start(echo(t), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	l.Close() // returns only when every goroutine of the link has ended
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(b); err == nil {
		t.Fatal("read after Close succeeded, want the connection closed")
	}
}

func TestNegativeDelay(t *testing.T) {
	if _, err := Start("127.0.0.1:1", -time.Second); err == nil {
		t.Fatal("Start with a negative delay succeeded")
	}
}
