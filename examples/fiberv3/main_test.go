package main

import (
	"context"
	"net"
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/apptest"
	"go.uber.org/goleak"
)

// fasthttp keeps a goroutine that refreshes its Date header cache, and its
// worker pool's cleaner sleeps before it sees the pool stopped.
func TestMain(m *testing.M) {
	apptest.Main(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

func TestService(t *testing.T) {
	a := apptest.New(t)
	f, err := NewApp(a)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, f, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	apptest.HTTP(t, a, "http://"+ln.Addr().String())
}
