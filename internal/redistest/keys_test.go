package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestCheckKeys leaves each kind of key the check forbids in the shared
// Redis, sees the check name it, and then sees it pass once the key is
// gone or has a TTL, so that a run leaving such a key fails at exit.
func TestCheckKeys(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":forever"
	t.Cleanup(func() { c.Del(context.Background(), key) })
	if err := c.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.CheckKeys(); err == nil || !strings.Contains(err.Error(), key+" (no TTL)") {
		t.Fatalf("a key without a TTL under a test's prefix: got %v", err)
	}
	if err := c.Expire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.CheckKeys(); err != nil && strings.Contains(err.Error(), key) {
		t.Fatalf("a key with a TTL is named: %v", err)
	}

	// a production key the run added, even with a TTL (deleted at once)
	prod := redistest.ProductionPrefix + "{" + redistest.Prefix(t) + "}:default"
	t.Cleanup(func() { c.Del(context.Background(), prod) })
	if err := c.Set(ctx, prod, "1", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.CheckKeys(); err == nil || !strings.Contains(err.Error(), prod+" (production prefix") {
		t.Fatalf("a key under the production prefix: got %v", err)
	}
	if err := c.Del(ctx, prod).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.CheckKeys(); err != nil && strings.Contains(err.Error(), prod) {
		t.Fatalf("a deleted key is named: %v", err)
	}
}
