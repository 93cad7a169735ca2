package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// ShutdownTimeout bounds a graceful shutdown.
const ShutdownTimeout = 10 * time.Second

// Main runs one example service: it reads the environment, opens the App,
// and calls serve until SIGINT or SIGTERM cancels its context. serve must
// return once the context is done. Errors end the process with status 1.
func Main(name string, serve func(ctx context.Context, a *App, ln net.Listener) error) {
	if err := run(name, serve); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func run(name string, serve func(ctx context.Context, a *App, ln net.Listener) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := Open(ctx, FromEnv(name, nil))
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		return fmt.Errorf("ADDR: %w", err)
	}
	a.Log.Info(name+" example listening", "addr", ln.Addr().String(), "redis", a.Redis, "overrides", a.Database)
	return serve(ctx, a, ln)
}

// MainHTTP is Main for a service that is an http.Handler.
func MainHTTP(name string, newHandler func(*App) (http.Handler, error)) {
	Main(name, func(ctx context.Context, a *App, ln net.Listener) error {
		h, err := newHandler(a)
		if err != nil {
			return err
		}
		return ServeHTTP(ctx, ln, h)
	})
}

// ServeHTTP serves h on ln until ctx is done, then shuts down gracefully.
func ServeHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return Serve(ctx, func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		return srv.Shutdown(sctx)
	})
}

// Serve runs serve until ctx is done, then calls shutdown, which must stop
// serve gracefully within ShutdownTimeout, waits for serve to return, and
// returns the first error of either: the loop every example's server runs
// in, whatever its framework.
func Serve(ctx context.Context, serve, shutdown func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	err := shutdown()
	if serr := <-errc; err == nil {
		err = serr
	}
	return err
}
