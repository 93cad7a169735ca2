package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
)

const deployBase = `default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
      export: {capacity: 10, refill_per_second: 0.1}
  pro:
    classes:
      default: {capacity: 200, refill_per_second: 50}
`

func TestParseDeploymentFields(t *testing.T) {
	cfg, err := config.Parse("tiers.yaml", []byte(deployBase+`breaker: {threshold: 3, cooldown: 2s}
local_fallback: 0.25
deny_cache: true
shadow: false
shadow_classes: [export]
leases:
  default: {size: 10, ttl: 500ms}
batching: false
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (&config.Breaker{Threshold: 3, Cooldown: 2 * time.Second}); !reflect.DeepEqual(cfg.Breaker, want) {
		t.Errorf("Breaker = %+v, want %+v", cfg.Breaker, want)
	}
	if cfg.LocalFallback != 0.25 || !cfg.DenyCache || cfg.Shadow || cfg.Batching {
		t.Errorf("LocalFallback %v DenyCache %v Shadow %v Batching %v", cfg.LocalFallback, cfg.DenyCache, cfg.Shadow, cfg.Batching)
	}
	if !reflect.DeepEqual(cfg.ShadowClasses, []string{"export"}) {
		t.Errorf("ShadowClasses = %v", cfg.ShadowClasses)
	}
	if want := map[string]config.Lease{"default": {Size: 10, TTL: 500 * time.Millisecond}}; !reflect.DeepEqual(cfg.Leases, want) {
		t.Errorf("Leases = %v, want %v", cfg.Leases, want)
	}
	// core accepts every option the file gives
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	r, err := cfg.NewResolver()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := cfg.NewLimiter(client, r)
	if err != nil {
		t.Fatalf("NewLimiter with the file's options: %v", err)
	}
	_ = lim.Close()

	off, err := config.Parse("tiers.yaml", []byte(deployBase+"breaker: {threshold: 0}\nshadow: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(off.Breaker, &config.Breaker{}) || !off.Shadow {
		t.Errorf("breaker off: Breaker %+v Shadow %v", off.Breaker, off.Shadow)
	}
}

func TestParseDeploymentDefaults(t *testing.T) {
	cfg, err := config.Parse("tiers.yaml", []byte(deployBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Breaker != nil || cfg.LocalFallback != 0 || cfg.DenyCache || cfg.Shadow || cfg.ShadowClasses != nil || cfg.Leases != nil || !cfg.Batching {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestParseDeploymentErrors(t *testing.T) {
	cases := []struct{ name, add, want string }{
		{"breaker unknown field", "breaker: {threshold: 3, cooldown: 1s, window: 2s}", "tiers.yaml:10: breaker.window: unknown field (want one of threshold, cooldown)"},
		{"breaker negative", "breaker: {threshold: -1, cooldown: 1s}", "tiers.yaml:10: breaker.threshold: must be 0 (off) to 1000000 consecutive failures, got -1"},
		{"breaker no threshold", "breaker: {cooldown: 1s}", "tiers.yaml:10: breaker.threshold: is required"},
		{"breaker no cooldown", "breaker: {threshold: 3}", "tiers.yaml:10: breaker.cooldown: is required with a threshold"},
		{"breaker off with cooldown", "breaker: {threshold: 0, cooldown: 1s}", "tiers.yaml:10: breaker.cooldown: the breaker is off (threshold 0): remove cooldown"},
		{"breaker cooldown too long", "breaker: {threshold: 3, cooldown: 2h}", "tiers.yaml:10: breaker.cooldown: must be > 0 and <= 1h0m0s, got 2h0m0s"},
		{"fallback zero", "local_fallback: 0", "tiers.yaml:10: local_fallback: must be a share of the quota in (0, 1]"},
		{"fallback above one", "local_fallback: 1.5", "tiers.yaml:10: local_fallback: must be a share of the quota in (0, 1]"},
		{"fallback NaN", "local_fallback: .nan", "tiers.yaml:10: local_fallback: must be a share of the quota in (0, 1]"},
		{"fallback not a number", "local_fallback: half", `tiers.yaml:10: local_fallback: must be a number, got "half"`},
		{"deny cache not a bool", "deny_cache: yes please", `tiers.yaml:10: deny_cache: must be true or false, got "yes please"`},
		{"shadow not a bool", "shadow: [export]", "tiers.yaml:10: shadow: must be a value, got a list"},
		{"shadow class unknown", "shadow_classes: [export, exprot]", `tiers.yaml:10: shadow_classes[1]: class "exprot" is not defined in any tier (classes: default, export)`},
		{"shadow class twice", "shadow_classes: [export, export]", `tiers.yaml:10: shadow_classes[1]: class "export" is already listed at line 10`},
		{"shadow class bad name", "shadow_classes: [\"ex port\"]", `tiers.yaml:10: shadow_classes[0]: bad name`},
		{"lease class unknown", "leases:\n  bulk: {size: 10, ttl: 1s}", `tiers.yaml:11: leases.bulk: class "bulk" is not defined in any tier`},
		{"lease size small", "leases:\n  default: {size: 1, ttl: 1s}", "tiers.yaml:11: leases.default.size: must be 2 to 1099511627776 tokens, got 1"},
		{"lease ttl missing", "leases:\n  default: {size: 10}", "tiers.yaml:11: leases.default.ttl: is required"},
		{"lease ttl zero", "leases:\n  default: {size: 10, ttl: 0s}", "tiers.yaml:11: leases.default.ttl: must be > 0 and <= 1h0m0s, got 0s"},
		{"lease unknown field", "leases:\n  default: {size: 10, ttl: 1s, renew: true}", "tiers.yaml:11: leases.default.renew: unknown field (want one of size, ttl)"},
		{"batching not a bool", "batching: 1", `tiers.yaml:10: batching: must be true or false, got "1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse("tiers.yaml", []byte(deployBase+c.add+"\n"))
			if err == nil {
				t.Fatalf("Parse accepted %q", c.add)
			}
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

func TestNewRedisClientRefusesBadURLs(t *testing.T) {
	cases := []struct{ url, want string }{
		{"", "empty Redis URL"},
		{"localhost:6379", "no scheme"},
		{"http://localhost:6379", `unsupported scheme "http"`},
		{"redis+ring://a:1", `unsupported scheme "redis+ring"`},
		{"redis://localhost:6379/x", "invalid database number"},
		{"redis+cluster://", "no host"},
		{"redis+cluster://a:1,,b:2", "empty host in the list"},
		{"redis+cluster://a:1,b:2/3", "a Cluster has no databases"},
		{"redis+cluster://a:1?colour=blue", "colour"},
		{"redis+sentinel://s1:26379", "no master name"},
		{"redis+sentinel://s1:26379/one/2/3", "want /master or /master/db"},
		{"redis+sentinel://s1:26379/one?master_name=two", `master name "one" in the path and "two" in master_name disagree`},
		{"redis+sentinel://s1:26379/mymaster/x", "invalid database number"},
		{"redis+sentinel://:s3cret@s1:26379", "no master name"},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			client, err := config.NewRedisClient(c.url)
			if err == nil {
				_ = client.Close()
				t.Fatalf("NewRedisClient(%q) accepted it", c.url)
			}
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestNewRedisClientForms(t *testing.T) {
	cases := []struct {
		url   string
		check func(t *testing.T, c redis.UniversalClient)
	}{
		{"redis://:pw@h1:7000/2", func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.Client).Options()
			if o.Addr != "h1:7000" || o.DB != 2 || o.Password != "pw" {
				t.Errorf("options %s %d %q", o.Addr, o.DB, o.Password)
			}
		}},
		{"redis+cluster://h1:7000,h2:7001,h3?addr=h4:7003&dial_timeout=3s", func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.ClusterClient).Options()
			if want := []string{"h1:7000", "h2:7001", "h3:6379", "h4:7003"}; !reflect.DeepEqual(o.Addrs, want) || o.DialTimeout != 3*time.Second {
				t.Errorf("Addrs %v, want %v; DialTimeout %v", o.Addrs, want, o.DialTimeout)
			}
		}},
		{"rediss+cluster://u:pw@h1:7000", func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.ClusterClient).Options()
			if o.TLSConfig == nil || o.Username != "u" || o.Password != "pw" {
				t.Errorf("TLS %v user %q password %q", o.TLSConfig, o.Username, o.Password)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			client, err := config.NewRedisClient(c.url)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			c.check(t, client)
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:s3cret@h:1/0":                  "redis://:xxxxx@h:1/0",
		"redis://u@h:1":                          "redis://u@h:1",
		"redis+sentinel://s:1/m?password=s3cret": "redis+sentinel://s:1/m?password=xxxxx",
		"redis+cluster://u:s3cret@a:1,b:2/?x=1":  "redis+cluster://u:xxxxx@a:1,b:2/?x=1",
		"redis://h:1/0?password=%zz":             "redis://h:1/0?(unparsable)",
		"localhost:6379":                         "(not a URL)",
	} {
		if got := config.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
