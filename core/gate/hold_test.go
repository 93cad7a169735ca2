package gate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
)

// The hold options are validated by New, which names the one at fault.
func TestHoldOptionsValidated(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opt  gate.Option
		bad  bool
	}{
		{"hold", gate.WithHold("default", time.Second), false},
		{"hold a day", gate.WithHold("default", 24*time.Hour), false},
		{"hold no wait", gate.WithHold("default", 0), true},
		{"hold negative", gate.WithHold("default", -time.Second), true},
		{"hold above a day", gate.WithHold("default", 24*time.Hour+time.Microsecond), true},
		{"hold bad class", gate.WithHold("no spaces", time.Second), true},
		{"hold empty class", gate.WithHold("", time.Second), true},
		{"max holds", gate.WithMaxHolds(1), false},
		{"max holds zero", gate.WithMaxHolds(0), true},
	} {
		_, err := gate.New(lim, c.opt)
		if (err != nil) != c.bad {
			t.Errorf("%s: error %v, want an error %v", c.name, err, c.bad)
		}
		if err != nil && (!errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "gate.With")) {
			t.Errorf("%s: error %v does not name the option or wrap ErrInvalidConfig", c.name, err)
		}
	}
}
