// Package anon is the anonymous caller's identity, shared by the gate that
// admits anonymous callers and the resolver that serves them from the tier
// defaults only. The identity is the tenant ID itself (its Prefix): nothing
// else marks a request as an anonymous caller's.
package anon

import (
	"net/netip"
	"strings"
)

// Prefix starts the tenant ID of an anonymous caller (gate.WithAnonymous):
// "anonymous:" + the client's IPv4 address, or its IPv6 /64 network
// ("anonymous:2001:db8:1:2::/64").
const Prefix = "anonymous:"

// ID is the tenant ID of an anonymous caller at ip. An IPv6 caller is
// grouped by its /64, the smallest allocation a subscriber gets: an address
// per request would otherwise be a fresh quota per request. IPv4-mapped
// addresses count as IPv4; an unparsable address is kept as is (the key
// scheme escapes it).
func ID(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return Prefix + ip
	}
	a = a.Unmap()
	if a.Is4() {
		return Prefix + a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil { // unreachable: 64 <= 128
		return Prefix + ip
	}
	return Prefix + p.String()
}

// Is reports whether tenantID is an anonymous caller's (ID's form): the
// gate refuses a verified tenant spelled so, and the tiered resolver serves
// such a tenant the tier defaults only.
func Is(tenantID string) bool { return strings.HasPrefix(tenantID, Prefix) }
