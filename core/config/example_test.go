package config_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/quota"
)

func ExampleParse() {
	cfg, err := config.Parse("tiers.yaml", []byte(`
default_tier: free
tiers:
  free:
    classes:
      default: {capacity: 20, refill_per_second: 2}
      export: {capacity: 10, refill_per_second: 0.1}
routes:
  - {method: POST, path: /v1/export, class: export, cost: 5}
  - {method: GET, path: /healthz, exempt: true}
grpc_methods:
  - {method: /acme.v1.Reports/*, class: export, cost: 2}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Tiers.Tiers["free"].Classes["export"])
	fmt.Println(cfg.Routes.Lookup("POST", "/v1/export"))
	fmt.Println(cfg.Routes.Lookup("GET", "/healthz"))
	fmt.Println(cfg.GRPCMethods.Lookup("", "/acme.v1.Reports/List"))
	// Output:
	// 10 burst, 0.1/s
	// {export 5 false} true
	// { 0 true} true
	// {export 2 false} true
}

func ExampleParse_errors() {
	_, err := config.Parse("tiers.yaml", []byte(`default_tier: free
tiers:
  free:
    classes:
      export: {capacity: -1, refill_per_second: 0.1}
      bulk: {capacity: 5, refil_per_second: 1}
`))
	fmt.Println(err)
	// Output:
	// tiers.yaml:5: tiers.free.classes.export.capacity: must be > 0, got -1
	// tiers.yaml:6: tiers.free.classes.bulk.refil_per_second: unknown field (want one of capacity, refill_per_second, concurrency, max_debt, max_settle_ratio)
	// tiers.yaml:6: tiers.free.classes.bulk.refill_per_second: is required (the sustained rate, tokens per second)
}

func ExampleWatch() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiers.yaml")
	write := func(capacity int) {
		_ = os.WriteFile(path, fmt.Appendf(nil, "default_tier: free\ntiers: {free: {classes: {default: {capacity: %d, refill_per_second: 1}}}}\n", capacity), 0o600)
	}
	write(20)
	cfg, _ := config.Load(path)
	resolver, _ := cfg.NewResolver()

	ctx, cancel := context.WithCancel(context.Background())
	rl, err := config.Watch(ctx, path, resolver)
	if err != nil {
		cancel()
		fmt.Println(err)
		return
	}
	write(50)
	_ = rl.Reload() // what the file poller does on a change
	bs, _ := resolver.Buckets(ctx, quota.Tenant{ID: "t1"}, "default")
	fmt.Println(bs[0].Quota.Capacity)

	cancel()
	<-rl.Done()
	// Output: 50
}
