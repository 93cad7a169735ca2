package core

import (
	"context"
	"net/netip"
)

// anonymousPrefix starts the tenant ID of an anonymous caller
// (WithAnonymous): "anonymous:" + the client's IPv4 address, or its IPv6
// /64 network ("anonymous:2001:db8:1:2::/64").
const anonymousPrefix = "anonymous:"

// anonymousID is the tenant ID of an anonymous caller at ip. An IPv6 caller
// is grouped by its /64, the smallest allocation a subscriber gets: an
// address per request would otherwise be a fresh quota per request.
// IPv4-mapped addresses count as IPv4; an unparsable address is kept as
// is (the key scheme escapes it).
func anonymousID(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return anonymousPrefix + ip
	}
	a = a.Unmap()
	if a.Is4() {
		return anonymousPrefix + a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil { // unreachable: 64 <= 128
		return anonymousPrefix + ip
	}
	return anonymousPrefix + p.String()
}

type anonymousKey struct{}

// isAnonymous reports whether ctx is the context of an anonymous caller's
// check (set by the Gate only; a client cannot set it).
func isAnonymous(ctx context.Context) bool {
	v, _ := ctx.Value(anonymousKey{}).(bool)
	return v
}
