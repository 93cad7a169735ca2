package redistest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProductionPrefix is the key prefix of a service's buckets (core's
// default). No test writes under it to the shared Redis: a key there would
// be a test charging, or resetting, a real tenant of a Redis shared with a
// deployment.
const ProductionPrefix = "rl:"

// The key check: every key a test leaves in the shared Redis has a TTL, and
// none is under ProductionPrefix. Prefix records the prefixes it hands out;
// the first use of the shared server records the production keys already
// there (a developer's own service), so only keys the run added count.
var (
	keysMu      sync.Mutex
	prefixes    = map[string]struct{}{}
	prodBefore  map[string]struct{} // nil until the shared server is first used
	checkTimout = 10 * time.Second
)

// prefixLen is the length of a prefix Prefix gives: "test-" and 12 hex
// digits.
const prefixLen = len("test-") + 12

func notePrefix(p string) {
	keysMu.Lock()
	prefixes[p] = struct{}{}
	keysMu.Unlock()
}

// noteShared records the production keys already in the shared server at
// its first use.
func noteShared(u string) {
	keys, err := scanKeys(u, ProductionPrefix+"*")
	keysMu.Lock()
	defer keysMu.Unlock()
	prodBefore = map[string]struct{}{}
	if err != nil {
		return // CheckKeys reports the server's error itself
	}
	for _, k := range keys {
		prodBefore[k] = struct{}{}
	}
}

// CheckKeys returns an error naming the keys the run left in the shared
// Redis against the rules every test follows: a key under a prefix
// [Prefix] gave without a TTL, and any key under [ProductionPrefix] the run
// added. Nil when the run never used the shared server. [Main] and
// [RunChecked] call it after the tests, so a run that leaves such a key
// fails.
func CheckKeys() error {
	u := sharedURL
	if u == "" {
		return nil
	}
	keysMu.Lock()
	mine := make(map[string]struct{}, len(prefixes))
	for p := range prefixes {
		mine[p] = struct{}{}
	}
	before := prodBefore
	keysMu.Unlock()

	var bad []string
	if len(mine) > 0 {
		keys, err := scanKeys(u, "test-*")
		if err != nil {
			return err
		}
		var ours []string
		for _, k := range keys {
			if len(k) < prefixLen {
				continue
			}
			if _, ok := mine[k[:prefixLen]]; ok {
				ours = append(ours, k)
			}
		}
		noTTL, err := withoutTTL(u, ours)
		if err != nil {
			return err
		}
		for _, k := range noTTL {
			bad = append(bad, k+" (no TTL)")
		}
	}
	prod, err := scanKeys(u, ProductionPrefix+"*")
	if err != nil {
		return err
	}
	for _, k := range prod {
		if _, ok := before[k]; !ok {
			bad = append(bad, k+" (production prefix "+ProductionPrefix+")")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("redistest: the run left %d key(s) in the shared Redis that every test must not leave (give each key a TTL; use Prefix, never %q): %s",
		len(bad), ProductionPrefix, strings.Join(bad, ", "))
}

func scanKeys(u, match string) ([]string, error) {
	c, err := sharedClient(u)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimout)
	defer cancel()
	var keys []string
	iter := c.Scan(ctx, 0, match, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("redistest: key check: scan %s: %w", match, err)
	}
	return keys, nil
}

// withoutTTL returns the keys of keys that exist and have no TTL.
func withoutTTL(u string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	c, err := sharedClient(u)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimout)
	defer cancel()
	var out []string
	for chunk := range slices.Chunk(keys, 500) {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range chunk {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("redistest: key check: PTTL: %w", err)
		}
		for i, cmd := range cmds {
			// -1: no TTL (a key gone in between answers -2)
			if d, _ := cmd.(*redis.DurationCmd).Result(); d == -1 {
				out = append(out, chunk[i])
			}
		}
	}
	return out, nil
}

func sharedClient(u string) (*redis.Client, error) {
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("redistest: key check: parse %q: %w", u, err)
	}
	return redis.NewClient(opt), nil
}

// finish is the end of Main and RunChecked: the key check, then every
// server stopped. A failed check makes a passing run fail.
func finish(code int) int {
	if err := CheckKeys(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	Shutdown()
	return code
}
