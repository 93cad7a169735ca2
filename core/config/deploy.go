package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"go.yaml.in/yaml/v3"
)

// Breaker is the file's breaker field: the limiter's circuit breaker
// (core.WithCircuitBreaker).
type Breaker struct {
	// Threshold is how many consecutive store failures of a shard open
	// its circuit; 0 turns the breaker off.
	Threshold int
	// Cooldown is how long an open circuit stays open before one probe;
	// 0 when Threshold is 0.
	Cooldown time.Duration
}

// Lease is one class's entry under the file's leases field: token leases
// (core.WithLeases).
type Lease struct {
	// Size is the most tokens one lease takes from the store, at least 2.
	Size int64
	// TTL is how long a lease's unspent tokens may be spent locally.
	TTL time.Duration
}

// Bounds on the deployment fields, beyond core's own rules.
const (
	maxBreakerThreshold = 1_000_000
	maxBreakerCooldown  = time.Hour
	maxLeaseTTL         = time.Hour
)

// deployment reads the fields that configure the limiter beyond the
// tiers: breaker, local_fallback, deny_cache, shadow, shadow_classes,
// leases and batching. It runs after the tiers are read, so that a class
// they name can be checked against the tiers.
func (p *schema) deployment(byName map[string]entry) {
	cfg := p.cfg
	if e, ok := byName["breaker"]; ok {
		cfg.Breaker = p.breaker(e.val)
	}
	if e, ok := byName["local_fallback"]; ok {
		if v, ok := p.float(e.val, "local_fallback"); ok {
			if math.IsNaN(v) || v <= 0 || v > 1 {
				p.failAt(deref(e.val), "local_fallback", "must be a share of the quota in (0, 1], e.g. 0.25 for 4 replicas, got %v", v)
			} else {
				cfg.LocalFallback = v
			}
		}
	}
	if e, ok := byName["deny_cache"]; ok {
		cfg.DenyCache, _ = p.bool(e.val, "deny_cache")
	}
	if e, ok := byName["batching"]; ok {
		if v, ok := p.bool(e.val, "batching"); ok {
			cfg.Batching = v
		}
	}
	if e, ok := byName["shadow"]; ok {
		cfg.Shadow, _ = p.bool(e.val, "shadow")
	}
	if e, ok := byName["shadow_classes"]; ok {
		seen := map[string]int{}
		for i, item := range p.sequence(e.val, "shadow_classes") {
			field := fmt.Sprintf("shadow_classes[%d]", i)
			s, ok := p.str(item, field)
			if !ok || !p.name(deref(item), field, s) || !p.knownClass(deref(item), field, s) {
				continue
			}
			if line, dup := seen[s]; dup {
				p.failAt(deref(item), field, "class %q is already listed at line %d", s, line)
				continue
			}
			seen[s] = deref(item).Line
			cfg.ShadowClasses = append(cfg.ShadowClasses, s)
		}
	}
	if e, ok := byName["leases"]; ok {
		cfg.Leases = p.leases(e.val)
	}
}

func (p *schema) breaker(n *yaml.Node) *Breaker {
	entries, ok := p.mapping(n, "breaker", "threshold", "cooldown")
	if !ok {
		return nil
	}
	var b Breaker
	var thresholdOK, cooldownSeen bool
	var cooldown *yaml.Node
	for _, e := range entries {
		switch e.name {
		case "threshold":
			v, ok := p.int64(e.val, "breaker.threshold")
			switch {
			case !ok:
			case v < 0 || v > maxBreakerThreshold:
				p.failAt(deref(e.val), "breaker.threshold", "must be 0 (off) to %d consecutive failures, got %d", maxBreakerThreshold, v)
			default:
				b.Threshold, thresholdOK = int(v), true
			}
		case "cooldown":
			cooldownSeen, cooldown = true, e.key
			if d, ok := p.duration(e.val, "breaker.cooldown", maxBreakerCooldown); ok {
				b.Cooldown = d
			}
		}
	}
	if !thresholdOK {
		if !slices.ContainsFunc(entries, func(e entry) bool { return e.name == "threshold" }) {
			p.failAt(deref(n), "breaker.threshold", "is required (consecutive failures that open the circuit; 0 turns the breaker off)")
		}
		return nil
	}
	switch {
	case b.Threshold == 0 && cooldownSeen:
		p.failAt(cooldown, "breaker.cooldown", "the breaker is off (threshold 0): remove cooldown or set a threshold")
		return nil
	case b.Threshold > 0 && !cooldownSeen:
		p.failAt(deref(n), "breaker.cooldown", "is required with a threshold (how long an open circuit waits before a probe, e.g. 1s)")
		return nil
	case b.Threshold > 0 && b.Cooldown == 0:
		return nil // reported by duration
	}
	return &b
}

func (p *schema) leases(n *yaml.Node) map[string]Lease {
	entries, ok := p.mapping(n, "leases")
	if !ok {
		return nil
	}
	out := make(map[string]Lease, len(entries))
	for _, e := range entries {
		field := "leases." + e.name
		if !p.name(e.key, field, e.name) || !p.knownClass(e.key, field, e.name) {
			continue
		}
		fields, ok := p.mapping(e.val, field, "size", "ttl")
		if !ok {
			continue
		}
		var l Lease
		var sizeOK, ttlOK bool
		for _, f := range fields {
			switch f.name {
			case "size":
				v, ok := p.int64(f.val, field+".size")
				switch {
				case !ok:
				case v < 2 || v > quota.MaxCapacity:
					p.failAt(deref(f.val), field+".size", "must be 2 to %d tokens, got %d", int64(quota.MaxCapacity), v)
				default:
					l.Size, sizeOK = v, true
				}
			case "ttl":
				l.TTL, ttlOK = p.duration(f.val, field+".ttl", maxLeaseTTL)
			}
		}
		for _, req := range []struct {
			name, what string
			seen       bool
		}{{"size", "tokens one lease takes, at least 2", sizeOK}, {"ttl", "how long a lease may be spent, e.g. 1s", ttlOK}} {
			if !req.seen && !slices.ContainsFunc(fields, func(f entry) bool { return f.name == req.name }) {
				p.failAt(deref(e.val), field+"."+req.name, "is required (%s)", req.what)
			}
		}
		if sizeOK && ttlOK {
			out[e.name] = l
		}
	}
	return out
}

// knownClass reports whether some tier declares class; when it is not, it
// reports that at n. A shadow or lease setting for a class no tier has is
// a typo that would silently do nothing. When the tiers could not all be
// read, every class is taken as known (their own errors are reported).
func (p *schema) knownClass(n *yaml.Node, field, class string) bool {
	if p.tierNames == nil {
		return true
	}
	x := p.tierIndex()
	if x.anyDeclares(class) {
		return true
	}
	if p.reporting() {
		p.failAt(n, field, "class %q is not defined in any tier (classes: %s)", class, strings.Join(x.allClasses(), ", "))
	}
	return false
}
