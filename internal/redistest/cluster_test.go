package redistest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestClusterExtraArgsKeptAcrossRestart: with appendfsync always, a master
// killed with SIGKILL and restarted keeps the write it acknowledged (its
// data directory and nodes.conf stay, and the extra arguments are passed
// again); without them the key would be gone.
func TestClusterExtraArgsKeptAcrossRestart(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 0, "--appendonly", "yes", "--appendfsync", "always")
	cc := cl.Client(t)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":restart"
	if err := cc.Set(ctx, key, "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var victim *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr() == m.Options().Addr {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("no node at %s", m.Options().Addr)
	}
	victim.Kill()
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	// a restarted master refuses its slots for its first 2 s
	vc := victim.Client(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := vc.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			t.Fatalf("after the restart %s is gone", key)
		}
		if err == nil {
			if got != "kept" {
				t.Fatalf("after the restart %s = %q, want kept", key, got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
