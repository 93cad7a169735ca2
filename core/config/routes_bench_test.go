package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/config"
)

// routesByTiers is a tier file of n tiers of one class each and 5n routes
// naming it (a route per path), with the given cost, and the same without
// a route.
func routesByTiers(n int) string {
	var b strings.Builder
	b.WriteString("version: 1\ndefault_tier: t0\ntiers:\n")
	for i := range n {
		fmt.Fprintf(&b, "  t%d: {classes: {default: {capacity: 10, refill_per_second: 1}}, ceiling: {capacity: 100, refill_per_second: 10}}\n", i)
	}
	b.WriteString("routes:\n")
	for i := range 5 * n {
		fmt.Fprintf(&b, "  - {method: GET, path: /r%d, class: default, cost: 2}\n", i)
	}
	return b.String()
}

// The route x tier check is linear in the file: each size doubles the
// tiers and the routes, and ns/op should double with it, not quadruple (a
// 990 KB file took 25 s of CPU when every route walked every tier).
func BenchmarkParseRoutesByTiers(b *testing.B) {
	for _, n := range []int{250, 500, 1000, 2000} {
		data := []byte(routesByTiers(n))
		b.Run(fmt.Sprintf("tiers=%d,routes=%d,bytes=%d", n, 5*n, len(data)), func(b *testing.B) {
			for b.Loop() {
				if _, err := config.Parse("big.yaml", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// CheckReload of a file against itself walks the same route x tier table.
func BenchmarkCheckReloadRoutesByTiers(b *testing.B) {
	for _, n := range []int{250, 500, 1000, 2000} {
		cfg, err := config.Parse("big.yaml", []byte(routesByTiers(n)))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("tiers=%d,routes=%d", n, 5*n), func(b *testing.B) {
			for b.Loop() {
				if err := cfg.CheckReload(cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
