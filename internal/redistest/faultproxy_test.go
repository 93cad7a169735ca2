package redistest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { os.Exit(redistest.RunChecked(m)) }

// proxied returns a client of the shared Redis through a new fault proxy,
// with retries off, and a direct client.
func proxied(t *testing.T) (*redistest.FaultProxy, *redis.Client, *redis.Client) {
	t.Helper()
	direct := redistest.Client(t)
	p := redistest.NewFaultProxy(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: direct.Options().DB, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return p, c, direct
}

func TestFaultProxy(t *testing.T) {
	t.Run("pass and latency", func(t *testing.T) {
		p, c, _ := proxied(t)
		ctx := context.Background()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.SetLatency(80 * time.Millisecond)
		p.Set(redistest.Latency)
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 80*time.Millisecond {
			t.Fatalf("a reply under 80ms latency came after %v", took)
		}
	})
	t.Run("drop reply after the command ran", func(t *testing.T) {
		p, c, direct := proxied(t)
		ctx := context.Background()
		key := redistest.Prefix(t) + ":n"
		t.Cleanup(func() { direct.Del(context.Background(), key) })
		if err := c.Ping(ctx).Err(); err != nil { // connect first: the handshake is spared anyway
			t.Fatal(err)
		}
		p.Set(redistest.DropReply)
		if err := c.Incr(ctx, key).Err(); err == nil {
			t.Fatal("the reply arrived")
		}
		if n, err := direct.Get(ctx, key).Int(); err != nil || n != 1 {
			t.Fatalf("the command must have run once: %d, %v", n, err)
		}
		p.Set(redistest.Pass)
		if n, err := c.Incr(ctx, key).Result(); err != nil || n != 2 {
			t.Fatalf("after the fault: %d, %v", n, err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		p, c, _ := proxied(t)
		ctx := context.Background()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.Set(redistest.Reset)
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("a reset connection answered")
		}
		p.Set(redistest.Pass)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	for _, f := range []redistest.Fault{redistest.Stall, redistest.Blackhole} {
		t.Run(f.String(), func(t *testing.T) {
			p, c, direct := proxied(t)
			ctx := context.Background()
			key := redistest.Prefix(t) + ":n"
			t.Cleanup(func() { direct.Del(context.Background(), key) })
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			p.Set(f)
			tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := c.Incr(tctx, key).Err(); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
				t.Fatalf("want a timeout, got %v", err)
			}
			n, _ := direct.Get(ctx, key).Int()
			if want := map[redistest.Fault]int{redistest.Stall: 1, redistest.Blackhole: 0}[f]; n != want {
				t.Fatalf("%v: the command ran %d times, want %d", f, n, want)
			}
			p.Set(redistest.Pass)
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("after the fault: %v", err)
			}
		})
	}
	t.Run("close ends every goroutine", func(t *testing.T) {
		addr := redistest.Client(t).Options().Addr
		before := goleak.IgnoreCurrent()
		p, err := redistest.StartFaultProxy(addr)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		p.Set(redistest.Stall)
		go func() { _ = c.Ping(context.Background()).Err() }() // held by the stall
		time.Sleep(20 * time.Millisecond)
		p.Close()
		_ = c.Close()
		if err := goleak.Find(before); err != nil {
			t.Fatal(err)
		}
	})
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
